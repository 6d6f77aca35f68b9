//! What the job's processes hold in memory, read from /proc. Each reader takes the /proc root
//! as a path so tests can point it at a fixture directory; parsing is separate from reading.

pub mod tree;
