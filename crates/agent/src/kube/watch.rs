//! A watch's body: one JSON event per line (`{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR,
//! "object": ...}`), read as it comes, whatever the chunks (a line may span many, a chunk hold
//! many lines).
//!
//! Bounded: a line longer than `MAX_LINE` ends the watch with an error rather than growing;
//! no byte for `idle` ends it too (the server ends a watch after its `timeoutSeconds`, so a
//! silence past that is a dead connection). An ERROR event (410 Expired: the resourceVersion
//! is too old) is the last item: the caller lists again.

use super::SliceEvent;
use super::http::Failure;
use super::types::{ObjectMeta, ResourceSlice, Status};
use futures::Stream;
use http_body_util::BodyExt;
use hyper::body::{Body, Bytes};
use serde::Deserialize;
use std::collections::VecDeque;
use std::time::Duration;

/// The longest event line read (as large as a whole answer may be).
pub const MAX_LINE: usize = super::http::MAX_BODY;

/// Complete lines out of a byte stream cut anywhere.
#[derive(Debug)]
pub struct Lines {
    partial: Vec<u8>,
    limit: usize,
}

impl Lines {
    pub fn new(limit: usize) -> Lines {
        Lines {
            partial: Vec::new(),
            limit,
        }
    }

    /// Take in `chunk`; every line it completes (blank ones left out) goes to `out`.
    pub fn push(&mut self, mut chunk: &[u8], out: &mut VecDeque<Vec<u8>>) -> Result<(), String> {
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            self.take(&chunk[..i])?;
            let line = std::mem::take(&mut self.partial);
            if !line.iter().all(u8::is_ascii_whitespace) {
                out.push_back(line);
            }
            chunk = &chunk[i + 1..];
        }
        self.take(chunk)
    }

    fn take(&mut self, bytes: &[u8]) -> Result<(), String> {
        if self.partial.len() + bytes.len() > self.limit {
            return Err(format!(
                "a watch event over {} bytes: not read further",
                self.limit
            ));
        }
        self.partial.extend_from_slice(bytes);
        Ok(())
    }

    /// Whether a line was begun and not ended.
    pub fn unfinished(&self) -> bool {
        !self.partial.iter().all(u8::is_ascii_whitespace)
    }
}

#[derive(Deserialize)]
struct RawEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    object: serde_json::Value,
}

#[derive(Deserialize)]
struct Bookmark {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// One event line as the slice watch's item.
pub fn decode(line: &[u8]) -> Result<SliceEvent, Failure> {
    let bad =
        |e: serde_json::Error| Failure::NoAnswer(format!("a watch event that is not one: {e}"));
    let ev: RawEvent = serde_json::from_slice(line).map_err(bad)?;
    let slice = |o: serde_json::Value| serde_json::from_value::<ResourceSlice>(o).map_err(bad);
    match ev.kind.as_str() {
        "ADDED" => Ok(SliceEvent::Added(slice(ev.object)?)),
        "MODIFIED" => Ok(SliceEvent::Modified(slice(ev.object)?)),
        "DELETED" => Ok(SliceEvent::Deleted(slice(ev.object)?)),
        "BOOKMARK" => {
            let b: Bookmark = serde_json::from_value(ev.object).map_err(bad)?;
            Ok(SliceEvent::Bookmark(
                b.metadata.resource_version.unwrap_or_default(),
            ))
        }
        "ERROR" => match serde_json::from_value::<Status>(ev.object) {
            Ok(s) if s.code != 0 => Err(Failure::Answer {
                code: s.code,
                reason: s.reason,
                message: s.message,
            }),
            _ => Err(Failure::NoAnswer(
                "an ERROR event without the server's Status".into(),
            )),
        },
        other => Err(Failure::NoAnswer(format!(
            "a watch event of unknown type {other:?}"
        ))),
    }
}

struct State<B> {
    body: B,
    lines: Lines,
    ready: VecDeque<Vec<u8>>,
    idle: Duration,
    done: bool,
}

/// The events of a watch's `body`, until it ends, fails, stays silent for `idle`, or says
/// ERROR (each of these the last item).
pub fn events<B>(body: B, idle: Duration) -> impl Stream<Item = Result<SliceEvent, Failure>>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let state = State {
        body,
        lines: Lines::new(MAX_LINE),
        ready: VecDeque::new(),
        idle,
        done: false,
    };
    futures::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(line) = st.ready.pop_front() {
                let item = decode(&line);
                if item.is_err() {
                    st.ready.clear();
                    st.done = true;
                }
                return Some((item, st));
            }
            if st.done {
                return None;
            }
            // Why the watch ends here, if it does.
            let why = match tokio::time::timeout(st.idle, st.body.frame()).await {
                Err(_) => Some(format!(
                    "the watch was silent for {:?}: taken as a dead connection",
                    st.idle
                )),
                Ok(None) if st.lines.unfinished() => {
                    Some("the watch ended in the middle of an event".to_owned())
                }
                Ok(None) => return None,
                Ok(Some(Err(e))) => Some(format!("reading the watch: {e}")),
                Ok(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => st.lines.push(&data, &mut st.ready).err(),
                    Err(_) => None,
                },
            };
            if let Some(why) = why {
                st.ready.clear();
                st.done = true;
                return Some((Err(Failure::NoAnswer(why)), st));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use http_body_util::StreamBody;
    use hyper::body::Frame;

    fn slice_line(kind: &str, name: &str) -> String {
        format!(
            r#"{{"type":"{kind}","object":{{"apiVersion":"resource.k8s.io/v1","kind":"ResourceSlice","metadata":{{"name":"{name}","resourceVersion":"7"}},"spec":{{"driver":"d","nodeName":"n","pool":{{"name":"n","generation":1,"resourceSliceCount":1}},"devices":[{{"name":"d0"}}]}}}}}}"#
        )
    }

    fn name(ev: &SliceEvent) -> String {
        match ev {
            SliceEvent::Added(s) => format!("ADDED {}", s.metadata.name.as_deref().unwrap()),
            SliceEvent::Modified(s) => format!("MODIFIED {}", s.metadata.name.as_deref().unwrap()),
            SliceEvent::Deleted(s) => format!("DELETED {}", s.metadata.name.as_deref().unwrap()),
            SliceEvent::Bookmark(rv) => format!("BOOKMARK {rv}"),
        }
    }

    fn body(
        chunks: Vec<Vec<u8>>,
    ) -> StreamBody<impl futures::Stream<Item = Result<Frame<Bytes>, String>> + Unpin> {
        StreamBody::new(futures::stream::iter(
            chunks.into_iter().map(|c| Ok(Frame::data(Bytes::from(c)))),
        ))
    }

    fn collect(chunks: Vec<Vec<u8>>) -> Vec<Result<String, Failure>> {
        let rt = crate::async_rt::current_thread().unwrap();
        rt.block_on(
            events(body(chunks), Duration::from_secs(5))
                .map(|r| r.map(|e| name(&e)))
                .collect(),
        )
    }

    #[test]
    fn events_are_read_however_the_chunks_cut_the_lines() {
        let text = format!(
            "{}\n{}\n\n{}\n{}\n",
            slice_line("ADDED", "a"),
            slice_line("MODIFIED", "a"),
            r#"{"type":"BOOKMARK","object":{"kind":"ResourceSlice","apiVersion":"resource.k8s.io/v1","metadata":{"resourceVersion":"12"}}}"#,
            slice_line("DELETED", "a"),
        );
        let want: Vec<Result<String, Failure>> = vec![
            Ok("ADDED a".into()),
            Ok("MODIFIED a".into()),
            Ok("BOOKMARK 12".into()),
            Ok("DELETED a".into()),
        ];
        // Every cut of the text into chunks of one size, from one byte to all of it.
        for size in [1, 2, 3, 7, 64, 333, text.len()] {
            let chunks = text.as_bytes().chunks(size).map(<[u8]>::to_vec).collect();
            assert_eq!(collect(chunks), want, "chunks of {size} bytes");
        }
        // Two events in one chunk, the second's end in the next.
        let (a, b) = text.split_at(slice_line("ADDED", "a").len() + 30);
        assert_eq!(collect(vec![a.into(), b.into()]), want);
    }

    #[test]
    fn an_error_event_is_the_last_item_with_the_servers_code_and_reason() {
        let text = format!(
            "{}\n{}\n{}\n",
            slice_line("ADDED", "a"),
            r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}"#,
            slice_line("ADDED", "b"),
        );
        assert_eq!(
            collect(vec![text.into_bytes()]),
            [
                Ok("ADDED a".into()),
                Err(Failure::Answer {
                    code: 410,
                    reason: "Expired".into(),
                    message: "too old resource version: 1 (2)".into()
                })
            ]
        );
    }

    #[test]
    fn a_cut_event_a_stranger_or_an_endless_line_ends_the_watch_with_an_error() {
        let cut = slice_line("ADDED", "a");
        let got = collect(vec![cut.as_bytes()[..40].to_vec()]);
        assert!(
            matches!(&got[..], [Err(Failure::NoAnswer(m))] if m.contains("middle of an event")),
            "{got:?}"
        );
        let got = collect(vec![b"{\"type\":\"SURPRISE\"}\n".to_vec()]);
        assert!(
            matches!(&got[..], [Err(Failure::NoAnswer(m))] if m.contains("SURPRISE")),
            "{got:?}"
        );
        let got = collect(vec![b"{\"type\":\"ERROR\",\"object\":{}}\n".to_vec()]);
        assert!(
            matches!(&got[..], [Err(Failure::NoAnswer(m))] if m.contains("without the server's Status")),
            "{got:?}"
        );
        let got = collect(vec![b"not json\n".to_vec()]);
        assert!(matches!(&got[..], [Err(Failure::NoAnswer(_))]), "{got:?}");

        let mut lines = Lines::new(16);
        let mut out = VecDeque::new();
        lines.push(b"0123456789\n0123456789", &mut out).unwrap();
        assert_eq!(out.len(), 1);
        let e = lines.push(b"0123456789", &mut out).unwrap_err();
        assert!(e.contains("over 16 bytes"), "{e}");
    }

    #[test]
    fn a_silent_watch_ends_after_the_idle_bound() {
        let rt = crate::async_rt::current_thread().unwrap();
        let got: Vec<_> = rt.block_on(async {
            let silent =
                StreamBody::new(futures::stream::pending::<Result<Frame<Bytes>, String>>());
            events(silent, Duration::from_millis(50)).collect().await
        });
        assert!(
            matches!(&got[..], [Err(Failure::NoAnswer(m))] if m.contains("silent for 50ms")),
            "{got:?}"
        );
    }
}
