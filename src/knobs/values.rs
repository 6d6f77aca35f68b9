//! The values the knobs had, as the run's records keep them: an attempt's knob values by name
//! ([`KnobValues`], in ladder order) and the last attempt's sizes ([`FinalSizes`]). Their JSON
//! is a contract of summary.json and a job's memory; writing those files is
//! [`crate::remember`]'s.

use serde::Serialize;

/// Knob values by name, in ladder order (a JSON object keeps the order it is written in).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KnobValues(pub Vec<(String, serde_json::Value)>);

impl Serialize for KnobValues {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl KnobValues {
    /// The same knobs with the same values, in whatever order (a job's file, read back through
    /// a JSON object, may hold them in another).
    pub fn same_as(&self, other: &KnobValues) -> bool {
        self.0.len() == other.0.len() && self.0.iter().all(|pair| other.0.contains(pair))
    }
}

/// Read back from a job's memory (`jobs`), in the order written.
impl<'de> serde::Deserialize<'de> for KnobValues {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = KnobValues;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of knob values")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<KnobValues, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, serde_json::Value>()? {
                    entries.push(entry);
                }
                Ok(KnobValues(entries))
            }
        }
        deserializer.deserialize_map(Entries)
    }
}

/// The sizes of the last attempt.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FinalSizes {
    pub batch_size: Option<u64>,
    pub accum: Option<u64>,
}
