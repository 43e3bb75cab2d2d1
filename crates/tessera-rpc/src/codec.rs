//! Byte-level reading and framing: a bounds-checked cursor over a payload,
//! and the `| cmd | size | payload |` / `| size | payload |` frames over any
//! `Read`/`Write`, with a size limit checked before a byte is buffered.
//!
//! Nothing here panics on any input: every read past the end is an
//! [`Error::Malformed`], and a frame's payload is buffered as it arrives
//! (a peer announcing 2^63 bytes and sending nine makes us allocate
//! nothing).

use std::io::{Read, Write};

use tessera::{Error, Result};

/// A cursor over received bytes.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                Error::Malformed(format!(
                    "message truncated: {n} bytes wanted at byte {} of {}",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// All bytes not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N)?);
        Ok(a)
    }

    /// A `u8`.
    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `i32`.
    pub fn i32(&mut self) -> Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// `Ok` only if every byte was read (payload sizes are exact).
    pub fn finish(&self) -> Result<()> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(Error::Malformed(format!(
                "{} unexpected trailing bytes",
                self.remaining()
            )))
        }
    }
}

/// Read exactly `size` bytes of payload, buffering only what arrives;
/// `size` above `limit` is refused before anything is read.
pub fn read_payload(r: &mut impl Read, size: u64, limit: u64) -> Result<Vec<u8>> {
    if size > limit {
        return Err(Error::Malformed(format!(
            "message of {size} bytes exceeds the limit of {limit} bytes"
        )));
    }
    let mut out = Vec::new();
    let got = r.take(size).read_to_end(&mut out)?;
    if got as u64 != size {
        return Err(Error::Malformed(format!(
            "connection closed after {got} of {size} payload bytes"
        )));
    }
    Ok(out)
}

/// Read a little-endian `u64`.
pub fn read_u64(r: &mut impl Read) -> Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// Read one request frame: the command byte (`None` on a clean end of
/// stream before it) and the payload.
pub fn read_request(r: &mut impl Read, limit: u64) -> Result<Option<(u8, Vec<u8>)>> {
    let mut cmd = [0u8; 1];
    loop {
        match r.read(&mut cmd) {
            Ok(0) => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            // A TLS peer that left between frames without close_notify.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    }
    let size = read_u64(r)?;
    let payload = read_payload(r, size, limit)?;
    Ok(Some((cmd[0], payload)))
}

/// Encode a request frame.
pub fn request_frame(cmd: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + payload.len());
    out.push(cmd);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Write a reply frame.
pub fn write_reply(w: &mut impl Write, payload: &[u8]) -> Result<()> {
    w.write_all(&(payload.len() as u64).to_le_bytes())?;
    w.write_all(payload)?;
    w.flush()?;
    Ok(())
}

/// Read a reply frame whose size must be exactly `expected`.
pub fn read_reply(r: &mut impl Read, expected: u64) -> Result<Vec<u8>> {
    let size = read_u64(r)?;
    if size != expected {
        return Err(Error::Malformed(format!(
            "reply of {size} bytes where {expected} were expected"
        )));
    }
    read_payload(r, size, expected)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn reader_never_reads_past_the_end() {
        let b = [1u8, 0, 0, 0, 2];
        let mut r = Reader::new(&b);
        assert_eq!(r.u32().unwrap(), 1);
        assert!(r.u32().is_err());
        assert_eq!(r.u8().unwrap(), 2);
        assert!(r.u8().is_err());
        assert!(r.bytes(usize::MAX).is_err());
        r.finish().unwrap();
    }

    #[test]
    fn frames_round_trip_and_limits_hold() {
        let f = request_frame(7, b"abc");
        assert_eq!(&f[..9], &[7, 3, 0, 0, 0, 0, 0, 0, 0]);
        let (cmd, p) = read_request(&mut &f[..], 16).unwrap().unwrap();
        assert_eq!((cmd, p.as_slice()), (7, &b"abc"[..]));
        // Over the limit: refused before reading.
        assert!(read_request(&mut &f[..], 2).is_err());
        // A huge announced size with nothing behind it allocates nothing.
        let mut huge = vec![6u8];
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(read_request(&mut &huge[..], u64::MAX).is_err());
        // Truncated payload and truncated size.
        assert!(read_request(&mut &f[..10], 16).is_err());
        assert!(read_request(&mut &f[..4], 16).is_err());
        assert!(read_request(&mut &[][..], 16).unwrap().is_none());
        let mut w = Vec::new();
        write_reply(&mut w, b"xy").unwrap();
        assert_eq!(read_reply(&mut &w[..], 2).unwrap(), b"xy");
        assert!(read_reply(&mut &w[..], 3).is_err());
    }
}
