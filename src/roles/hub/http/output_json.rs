//! The JSON form of an output read (`GET /api/v1/runs/ID/targets/M/output`), within the
//! room the budget set aside for it (`budget::output_answer_room`).
//!
//! The bytes travel as one JSON string: invalid UTF-8 becomes U+FFFD (3 bytes) and a
//! control byte `\u00XX` (6 bytes), so output made of control bytes took six times its
//! `max_bytes`, three times the room set aside (100 viewers took the hub from 75 to 212
//! MiB against a budget of 48). An answer therefore holds as much of the slice as fits
//! in its room once escaped, and says where the rest starts:
//!
//! - a read from a position keeps the longest *prefix* that fits, and `next_from` is the
//!   position of the first byte left out;
//! - a `tail` read keeps the longest *suffix* that fits (the last bytes are what it asks
//!   for), and `next_from` stays where the slice ended.
//!
//! Ordinary text (a byte or so each) is never cut: only bytes that escape to more than
//! twice their size can make an answer outgrow its room. Every answer holds at least one
//! character, so a reader always moves on.

use serde::Serialize;

use crate::wire::admin::OutputSlice;

/// Bytes `c` takes inside a JSON string as `serde_json` writes it.
fn json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{08}' | '\u{0c}' | '\n' | '\r' | '\t' => 2,
        c if c < ' ' => 6,
        c => c.len_utf8(),
    }
}

/// Calls `f(bytes of data, bytes in JSON)` for each unit of `data` in order, while it
/// answers true. A unit is one character, or one invalid sequence (written as U+FFFD, as
/// `from_utf8_lossy` does).
fn each_unit(data: &[u8], mut f: impl FnMut(usize, usize) -> bool) {
    for chunk in data.utf8_chunks() {
        for c in chunk.valid().chars() {
            if !f(c.len_utf8(), json_len(c)) {
                return;
            }
        }
        let bad = chunk.invalid();
        if !bad.is_empty() && !f(bad.len(), 3) {
            return;
        }
    }
}

/// How many bytes of `data` make a JSON string of at most `room` bytes: the longest
/// prefix (or, `from_end`, suffix) ending between two units; at least one unit.
pub(super) fn fitting(data: &[u8], room: usize, from_end: bool) -> usize {
    // Six bytes of JSON per byte at most: the whole of a short enough slice fits.
    if data.len().saturating_mul(6) <= room {
        return data.len();
    }
    if from_end {
        let mut rest = 0;
        each_unit(data, |_, json| {
            rest += json;
            true
        });
        // Leave out units from the front until the rest fits (the last one stays).
        let mut cut = 0;
        each_unit(data, |bytes, json| {
            if rest <= room || cut + bytes == data.len() {
                return false;
            }
            rest -= json;
            cut += bytes;
            true
        });
        return data.len() - cut;
    }
    let (mut used, mut taken) = (0, 0);
    each_unit(data, |bytes, json| {
        used += json;
        if used > room && taken > 0 {
            return false;
        }
        taken += bytes;
        true
    });
    taken
}

/// The answer's fields; declared in the order `serde_json` sorts an object's keys, so the
/// text is what `json!` wrote before.
#[derive(Serialize)]
struct Answer<'a> {
    bytes: usize,
    data: &'a str,
    from: u64,
    next_from: u64,
    omitted_at: Option<usize>,
    omitted_bytes: u64,
    total_bytes: u64,
}

/// The output position of `data[at]` in a slice read from position `from` (not a `tail`
/// read). db returns the kept bytes from `from` on: the head (`[0, H)`), then, past the
/// gap of `omitted_bytes` the output limit dropped, the tail up to the end; `omitted_at`
/// marks the gap when the slice spans it. So before the gap (or with none in the slice)
/// the data starts at `from`; from the gap on it runs to `next_from`. `None` when the
/// slice says otherwise (then it is not cut).
fn position_of(s: &OutputSlice, from: u64, at: usize) -> Option<u64> {
    let gap = s.omitted_at.filter(|_| s.omitted_bytes > 0);
    match gap {
        Some(g) if at >= g => s.next_from.checked_sub((s.data.len() - at) as u64),
        _ => from.checked_add(at as u64),
    }
}

/// The JSON body answering an output read: the slice `s` of a read from `from` (or its
/// last bytes, `tail`), cut to what fits in `room` bytes of JSON string.
pub(super) fn render(s: &OutputSlice, from: u64, tail: bool, room: usize) -> Vec<u8> {
    let len = s.data.len();
    let keep = fitting(&s.data, room, tail);
    let (data, next_from, omitted_at) = if keep == len {
        (&s.data[..], s.next_from, s.omitted_at)
    } else if tail {
        let cut = len - keep;
        let at = s.omitted_at.and_then(|at| at.checked_sub(cut));
        (&s.data[cut..], s.next_from, at)
    } else {
        match position_of(s, from, keep) {
            Some(next) => {
                let at = s.omitted_at.filter(|at| *at <= keep);
                (&s.data[..keep], next, at)
            }
            None => (&s.data[..], s.next_from, s.omitted_at),
        }
    };
    let text = String::from_utf8_lossy(data);
    let answer = Answer {
        bytes: data.len(),
        data: &text,
        from,
        next_from,
        omitted_at,
        omitted_bytes: s.omitted_bytes,
        total_bytes: s.total_bytes,
    };
    let mut body = Vec::with_capacity(room.min(len.saturating_mul(6)) + 256);
    if serde_json::to_writer(&mut body, &answer).is_err() {
        body = b"null".to_vec();
    }
    body.push(b'\n');
    body
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(data: &[u8], next_from: u64) -> OutputSlice {
        OutputSlice {
            data: data.to_vec(),
            omitted_bytes: 0,
            omitted_at: None,
            total_bytes: next_from,
            next_from,
        }
    }

    fn answer(body: &[u8]) -> serde_json::Value {
        serde_json::from_slice(body).expect("JSON")
    }

    #[test]
    fn json_lengths_are_what_serde_json_writes() {
        let all: String = (0u32..0x300).filter_map(char::from_u32).collect();
        for c in all.chars().chain(['\u{fffd}', '😀']) {
            let written = serde_json::to_string(&c.to_string()).expect("encode");
            assert_eq!(json_len(c), written.len() - 2, "{c:?}");
        }
        let bytes = b"ok\0\x1b[31m\xff\xfe\"\\\n\xe2\x82";
        let lossy = String::from_utf8_lossy(bytes);
        let written = serde_json::to_string(&lossy).expect("encode").len() - 2;
        let (mut raw, mut json) = (0, 0);
        each_unit(bytes, |b, j| {
            raw += b;
            json += j;
            true
        });
        assert_eq!((raw, json), (bytes.len(), written));
    }

    #[test]
    fn ordinary_text_is_never_cut() {
        let text = "a line of output, with ünïcödé\tand tabs\n".repeat(1000);
        let s = slice(text.as_bytes(), 50_000 + text.len() as u64);
        let v = answer(&render(&s, 50_000, false, 2 * text.len()));
        assert_eq!(v["data"], text.as_str());
        assert_eq!(v["bytes"], text.len());
        assert_eq!(v["next_from"], s.next_from);
        assert_eq!(v["from"], 50_000);
    }

    #[test]
    fn control_bytes_are_cut_to_the_room_and_the_read_goes_on_from_there() {
        let data = vec![0u8; 1 << 20];
        let s = slice(&data, 4096 + data.len() as u64);
        let room = 2 << 20;
        let body = render(&s, 4096, false, room);
        assert!(body.len() <= room + 256, "{} bytes", body.len());
        let v = answer(&body);
        let kept = room / 6;
        assert_eq!(v["bytes"], kept);
        assert_eq!(v["data"].as_str().map(str::len), Some(kept));
        assert_eq!(v["next_from"], 4096 + kept as u64);
        assert_eq!(v["total_bytes"], s.total_bytes);
    }

    #[test]
    fn a_cut_falls_between_characters_and_takes_at_least_one() {
        // Two-byte characters after a control byte: the cut never splits one.
        let data = "\u{1}é".repeat(100);
        let keep = fitting(data.as_bytes(), 17, false);
        assert_eq!(keep, 6, "two of (6 + 2 JSON bytes, 3 bytes)");
        assert!(data.is_char_boundary(keep));
        assert_eq!(
            fitting(b"\0\0", 1, false),
            1,
            "one unit even if it does not fit"
        );
        assert_eq!(fitting(b"\xff\xfe", 1, true), 1);
        assert_eq!(fitting(b"", 0, false), 0);
    }

    #[test]
    fn a_tail_read_keeps_its_last_bytes() {
        let mut data = vec![b'x'; 10];
        data.extend(vec![0u8; 90]);
        let mut s = slice(&data, 1000);
        s.omitted_bytes = 500;
        s.omitted_at = Some(5);
        let v = answer(&render(&s, 0, true, 120));
        assert_eq!(v["bytes"], 20);
        assert_eq!(v["next_from"], 1000, "it ended where the slice ends");
        assert_eq!(
            v["omitted_at"],
            serde_json::Value::Null,
            "the gap was cut off"
        );
        s.omitted_at = Some(85);
        let v = answer(&render(&s, 0, true, 120));
        assert_eq!(v["omitted_at"], 5);
    }

    #[test]
    fn positions_follow_the_gap_the_output_limit_left() {
        // Kept: the head [0, 100) and the tail [600, 700); read from 40.
        let mut data = vec![b'h'; 60];
        data.extend(vec![0u8; 100]);
        let mut s = slice(&data, 700);
        s.omitted_bytes = 500;
        s.omitted_at = Some(60);
        assert_eq!(position_of(&s, 40, 10), Some(50), "in the head");
        assert_eq!(position_of(&s, 40, 60), Some(600), "the gap's end");
        assert_eq!(position_of(&s, 40, 100), Some(640), "in the tail");
        // Cut in the tail: the gap stays in the answer.
        let v = answer(&render(&s, 40, false, 60 + 6 * 30));
        assert_eq!(v["bytes"], 90);
        assert_eq!(v["next_from"], 630);
        assert_eq!(v["omitted_at"], 60);
        // Cut in the head: it does not.
        let mut head = vec![0u8; 60];
        head.extend(vec![b't'; 100]);
        s.data = head;
        let v = answer(&render(&s, 40, false, 60));
        assert_eq!(v["bytes"], 10);
        assert_eq!(v["next_from"], 50);
        assert_eq!(v["omitted_at"], serde_json::Value::Null);
        // A read from inside the gap starts at its end.
        s.data = vec![0u8; 100];
        s.omitted_at = Some(0);
        let v = answer(&render(&s, 300, false, 60));
        assert_eq!(v["next_from"], 610);
        assert_eq!(v["omitted_at"], 0);
        // A slice that contradicts itself is not cut (rather than answer a wrong place).
        s.next_from = 5;
        let v = answer(&render(&s, 300, false, 60));
        assert_eq!(v["bytes"], 100);
    }

    #[test]
    fn the_text_is_what_json_wrote_before() {
        let s = OutputSlice {
            data: b"hi\n".to_vec(),
            omitted_bytes: 3,
            omitted_at: Some(1),
            total_bytes: 9,
            next_from: 9,
        };
        let before = serde_json::json!({
            "from": 2, "next_from": 9, "total_bytes": 9, "omitted_bytes": 3,
            "omitted_at": Some(1), "bytes": 3, "data": "hi\n",
        });
        let mut expected = serde_json::to_vec(&before).expect("encode");
        expected.push(b'\n');
        assert_eq!(render(&s, 2, false, 1 << 20), expected);
    }
}
