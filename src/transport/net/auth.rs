//! Authentication of connection set-up: a keyed MAC (SipHash-2-4, std's keyed hasher, run
//! twice for 128 bits) over a challenge, keyed by the job secret. The secret itself never
//! crosses the network, and a recorded answer does not fit another challenge.

use std::hash::Hasher;

/// A 128-bit key derived from the job secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Key([u64; 2]);

#[allow(deprecated)] // SipHasher is deprecated only in favour of a randomly keyed DefaultHasher.
fn sip(k0: u64, k1: u64, parts: &[&[u8]]) -> u64 {
    let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
    for p in parts {
        h.write(&(p.len() as u64).to_le_bytes());
        h.write(p);
    }
    h.finish()
}

impl Key {
    pub fn from_secret(secret: &[u8]) -> Key {
        const C: u64 = 0x6770_756d_7069_6e65; // "gpumpine"
        Key([
            sip(C, !C, &[b"gpumpi-net-key-0", secret]),
            sip(!C, C, &[b"gpumpi-net-key-1", secret]),
        ])
    }

    /// The 128-bit MAC of `parts` (each length-prefixed, so boundaries cannot shift).
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 16] {
        let a = sip(self.0[0], self.0[1], parts);
        let b = sip(self.0[1] ^ 0x5a5a_5a5a_5a5a_5a5a, self.0[0], parts);
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&a.to_le_bytes());
        out[8..].copy_from_slice(&b.to_le_bytes());
        out
    }
}

/// Equality that takes the same time wherever the first difference is.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `n` random bytes from the kernel.
pub fn random<const N: usize>() -> std::io::Result<[u8; N]> {
    use std::io::Read;
    let mut b = [0u8; N];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_depends_on_key_and_every_part() {
        let k = Key::from_secret(b"secret");
        let m = k.mac(&[b"ab", b"c"]);
        assert_eq!(m, Key::from_secret(b"secret").mac(&[b"ab", b"c"]));
        assert_ne!(m, Key::from_secret(b"secreT").mac(&[b"ab", b"c"]));
        assert_ne!(
            m,
            k.mac(&[b"a", b"bc"]),
            "part boundaries are part of the input"
        );
        assert_ne!(m, k.mac(&[b"ab", b"d"]));
        assert!(ct_eq(&m, &m) && !ct_eq(&m, &[0; 16]) && !ct_eq(&m, &m[..15]));
        assert_ne!(random::<16>().unwrap(), random::<16>().unwrap());
    }
}
