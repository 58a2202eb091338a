//! The overflow spool: unacknowledged output frames beyond the memory cap, kept in a file
//! so a long disconnection loses nothing up to the spool cap.
//!
//! The file is created with `O_EXCL|O_NOFOLLOW` and mode 0600 inside a private (0700)
//! directory and unlinked at once, so it lives only as long as the wrapper's descriptor
//! and a crash leaves nothing behind. Records are appended as
//! `[u8 stream][u64 seq BE][u32 len BE][bytes]` and read back in order; when the reader
//! catches up with the writer the file is truncated.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::wire::wrapper::{OutputFrame, Stream};

use super::error::WrapperError;

const RECORD_HEADER: u64 = 13;

pub(super) struct Spool {
    file: File,
    path: PathBuf,
    read_pos: u64,
    write_pos: u64,
    /// (seq, data length) of each record still in the file, oldest first.
    index: VecDeque<(u64, u32)>,
    data_bytes: u64,
}

impl Spool {
    /// Creates an anonymous spool file in `dir` (which the caller made private).
    pub(super) fn create_in(dir: &Path, tag: &str) -> Result<Spool, WrapperError> {
        let path = dir.join(format!(
            "spool-{tag}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|err| WrapperError::Spool {
                path: path.clone(),
                err,
            })?;
        std::fs::remove_file(&path).map_err(|err| WrapperError::Spool {
            path: path.clone(),
            err,
        })?;
        log::info!(
            "spooling output beyond the memory cap to (unlinked) {}",
            path.display()
        );
        Ok(Spool {
            file,
            path,
            read_pos: 0,
            write_pos: 0,
            index: VecDeque::new(),
            data_bytes: 0,
        })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Output bytes held (headers not counted).
    pub(super) fn bytes(&self) -> u64 {
        self.data_bytes
    }

    /// Length of the oldest record's data (0 when empty).
    pub(super) fn peek_len(&self) -> usize {
        self.index.front().map_or(0, |(_, len)| *len as usize)
    }

    pub(super) fn append(&mut self, frame: &OutputFrame) -> Result<(), WrapperError> {
        let len = u32::try_from(frame.data.len()).map_err(|_| WrapperError::Spool {
            path: self.path.clone(),
            err: std::io::Error::other("frame larger than 4 GiB"),
        })?;
        let mut record = Vec::with_capacity(RECORD_HEADER as usize + frame.data.len());
        record.push(frame.stream as u8);
        record.extend_from_slice(&frame.seq.to_be_bytes());
        record.extend_from_slice(&len.to_be_bytes());
        record.extend_from_slice(&frame.data);
        self.file
            .write_all_at(&record, self.write_pos)
            .map_err(|err| self.io_error(err))?;
        self.write_pos += record.len() as u64;
        self.index.push_back((frame.seq, len));
        self.data_bytes += u64::from(len);
        Ok(())
    }

    /// Takes the oldest record out of the spool.
    pub(super) fn pop(&mut self) -> Result<OutputFrame, WrapperError> {
        let Some(&(seq, len)) = self.index.front() else {
            return Err(self.io_error(std::io::Error::other("spool is empty")));
        };
        let mut record = vec![0u8; RECORD_HEADER as usize + len as usize];
        self.file
            .read_exact_at(&mut record, self.read_pos)
            .map_err(|err| self.io_error(err))?;
        let stream = match record[0] {
            1 => Stream::Stdout,
            2 => Stream::Stderr,
            other => {
                return Err(self.io_error(std::io::Error::other(format!(
                    "record has unknown stream {other}"
                ))));
            }
        };
        let mut seq_bytes = [0u8; 8];
        seq_bytes.copy_from_slice(&record[1..9]);
        if u64::from_be_bytes(seq_bytes) != seq {
            return Err(self.io_error(std::io::Error::other("record out of order")));
        }
        self.index.pop_front();
        self.read_pos += record.len() as u64;
        self.data_bytes -= u64::from(len);
        record.drain(..RECORD_HEADER as usize);
        Ok(OutputFrame {
            stream,
            seq,
            data: record,
        })
    }

    /// Forgets everything and gives the disk space back.
    pub(super) fn clear(&mut self) {
        self.index.clear();
        self.data_bytes = 0;
        self.read_pos = 0;
        self.write_pos = 0;
        if let Err(err) = self.file.set_len(0) {
            log::warn!("could not truncate spool {}: {err}", self.path.display());
        }
    }

    fn io_error(&self, err: std::io::Error) -> WrapperError {
        WrapperError::Spool {
            path: self.path.clone(),
            err,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_in_order_and_file_is_unlinked() {
        let dir = tempfile::tempdir().unwrap();
        let mut sp = Spool::create_in(dir.path(), "x").unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        for seq in 1..=3u64 {
            let f = OutputFrame {
                stream: if seq == 2 {
                    Stream::Stderr
                } else {
                    Stream::Stdout
                },
                seq,
                data: vec![seq as u8; seq as usize * 10],
            };
            sp.append(&f).unwrap();
        }
        assert_eq!((sp.bytes(), sp.peek_len()), (60, 10));
        let a = sp.pop().unwrap();
        let b = sp.pop().unwrap();
        assert_eq!((a.seq, a.stream, a.data.len()), (1, Stream::Stdout, 10));
        assert_eq!(
            (b.seq, b.stream, b.data),
            (2, Stream::Stderr, vec![2u8; 20])
        );
        assert_eq!(sp.pop().unwrap().seq, 3);
        assert!(sp.is_empty() && sp.pop().is_err());
    }
}
