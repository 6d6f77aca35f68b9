//! Sizes for people: parsing `--memory-max 8G` / `512MiB` / `10%` and printing `1.2 GiB`.
//! Binary units throughout (G = GiB), as `free -h`, Slurm and systemd use them.

/// Parses a size: `8G`, `8GiB`, `512M`, `1.5 GB`, `1073741824`. `G`, `GB` and `GiB` all mean
/// 2^30: memory is sized in binary units, and a user writing `--memory-max 8G` means 8 GiB.
pub fn parse_size(text: &str) -> Result<u64, String> {
    parse_size::Config::new()
        .with_binary()
        .parse_size(text.trim())
        .map_err(|_| {
            format!("`{text}` is not a size: use a number with a unit, e.g. 512M, 8G, 1.5GiB")
        })
}

/// Formats bytes with a binary unit and one decimal: `512 B`, `1.5 KiB`, `13.0 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `n` with a comma between each group of three digits: `1,204`, `3,000,000`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A rate for people: grouped by thousands (`12,345`), one decimal below 10 (`2.5`).
pub fn rate(per_second: f64) -> String {
    if per_second < 10.0 {
        format!("{per_second:.1}")
    } else {
        thousands(per_second.round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_grouped_with_a_decimal_only_when_small() {
        for (r, want) in [
            (0.26, "0.3"),
            (2.54, "2.5"),
            (9.94, "9.9"),
            (10.0, "10"),
            (156.1, "156"),
            (999.6, "1,000"),
            (12_345.4, "12,345"),
            (1_234_567.0, "1,234,567"),
        ] {
            assert_eq!(rate(r), want, "{r}");
        }
    }

    #[test]
    fn thousands_are_grouped() {
        for (n, want) in [
            (0, "0"),
            (999, "999"),
            (1204, "1,204"),
            (3_000_000, "3,000,000"),
        ] {
            assert_eq!(thousands(n), want);
        }
    }

    #[test]
    fn sizes_parse_in_binary_units() {
        let table = [
            ("8G", 8 << 30),
            ("8GiB", 8 << 30),
            ("8 GB", 8 << 30),
            ("512M", 512 << 20),
            ("1.5G", 3 << 29),
            ("4096", 4096),
            ("64k", 64 << 10),
        ];
        for (text, want) in table {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
        for bad in ["", "lots", "8 furlongs", "-1G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bytes_print_short() {
        let table = [
            (0, "0 B"),
            (1023, "1023 B"),
            (1536, "1.5 KiB"),
            (13 << 30, "13.0 GiB"),
            (3 << 29, "1.5 GiB"),
        ];
        for (bytes, want) in table {
            assert_eq!(human_bytes(bytes), want);
        }
    }
}
