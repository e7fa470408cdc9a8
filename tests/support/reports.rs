//! Reading a launched job's stdout to its end while noting when its last "rank ..." report
//! line arrived (the tests of mpirun and of multi-node launch time what follows that report).

use std::io::{BufRead, BufReader, Read};
use std::time::Instant;

/// All of `r` as a string, and the instant the last line starting with "rank " was read (the
/// start, if none was).
pub fn read_reports(r: impl Read) -> (String, Instant) {
    let (mut s, mut last) = (String::new(), Instant::now());
    let mut r = BufReader::new(r);
    loop {
        let n = s.len();
        if r.read_line(&mut s).unwrap() == 0 {
            break;
        }
        if s[n..].starts_with("rank ") {
            last = Instant::now();
        }
    }
    (s, last)
}
