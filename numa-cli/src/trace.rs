//! The trace file: a versioned, self-describing binary recording.
//!
//! ```text
//! "NUMATRC\0"  u32 format_version  u32 header_len  header (JSON)
//! records: u8 tag, u32 len, payload (len bytes)
//!   1 fault, 2 scan, 3 skip: the #[repr(C)] event bytes (native endian)
//!   4 snapshot: JSON `decode::Snapshot`
//!   5 footer: JSON `Footer`, last record of a complete file
//! ```
//! A truncated file reads up to its last complete record, with a warning.
use std::{
    fs::File,
    io::{BufReader, BufWriter, ErrorKind, Read, Write},
    path::Path,
};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::{
    decode::{self, Event, Snapshot},
    probe::{params::KernelParams, plan::AttachPlan},
    system,
};

pub const MAGIC: &[u8; 8] = b"NUMATRC\0";
pub const FORMAT_VERSION: u32 = 1;

const TAG_FAULT: u8 = 1;
const TAG_SCAN: u8 = 2;
const TAG_SKIP: u8 = 3;
const TAG_SNAPSHOT: u8 = 4;
const TAG_FOOTER: u8 = 5;

/// Everything needed to interpret the events without the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub format_version: u32,
    pub numatrace_version: String,
    pub abi_version: u32,
    pub kernel_release: String,
    pub attach_plan: Option<AttachPlan>,
    pub nodes: Vec<system::Node>,
    pub memory_tiers: Vec<system::MemoryTier>,
    pub tunables: system::Tunables,
    pub numa_balancing: Option<u32>,
    pub params: Option<KernelParams>,
    pub started_unix_ns: u64,
    /// CLOCK_MONOTONIC at start, the clock of event timestamps.
    pub started_mono_ns: u64,
    /// CLOCK_MONOTONIC when the probes began attaching (no stamp is older).
    #[serde(default)]
    pub attach_started_mono_ns: u64,
    pub sample_every: u64,
    /// Capacity of the per-folio stamp map (for the eviction estimate).
    #[serde(default)]
    pub stamp_entries: u32,
    pub record_sizes: [usize; 3],
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Footer {
    pub ended_mono_ns: u64,
    pub events: u64,
    pub reason: String,
}

pub fn record_sizes() -> [usize; 3] {
    [
        std::mem::size_of::<numa_ebpf_common::FaultEvent>(),
        std::mem::size_of::<numa_ebpf_common::ScanEvent>(),
        std::mem::size_of::<numa_ebpf_common::SkipEvent>(),
    ]
}

pub struct Writer<W: Write> {
    out: W,
    events: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(mut out: W, header: &Header) -> Result<Self> {
        let json = serde_json::to_vec(header)?;
        out.write_all(MAGIC)?;
        out.write_all(&FORMAT_VERSION.to_le_bytes())?;
        out.write_all(&(json.len() as u32).to_le_bytes())?;
        out.write_all(&json)?;
        Ok(Writer { out, events: 0 })
    }

    fn record(&mut self, tag: u8, payload: &[u8]) -> Result<()> {
        self.out.write_all(&[tag])?;
        self.out.write_all(&(payload.len() as u32).to_le_bytes())?;
        self.out.write_all(payload)?;
        Ok(())
    }

    pub fn event(&mut self, ev: &Event) -> Result<()> {
        let tag = match ev {
            Event::Fault(_) => TAG_FAULT,
            Event::Scan(_) => TAG_SCAN,
            Event::Skip(_) => TAG_SKIP,
        };
        self.events += 1;
        self.record(tag, decode::raw_bytes(ev))
    }

    pub fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        self.record(TAG_SNAPSHOT, &serde_json::to_vec(s)?)
    }

    pub fn finish(mut self, ended_mono_ns: u64, reason: &str) -> Result<W> {
        let footer = Footer {
            ended_mono_ns,
            events: self.events,
            reason: reason.to_owned(),
        };
        self.record(TAG_FOOTER, &serde_json::to_vec(&footer)?)?;
        self.out.flush()?;
        Ok(self.out)
    }
}

pub fn create(path: &Path, header: &Header) -> Result<Writer<BufWriter<File>>> {
    let f =
        File::create(path).with_context(|| format!("creating trace file {}", path.display()))?;
    Writer::new(BufWriter::with_capacity(1 << 20, f), header)
}

/// One item read back from a trace.
#[derive(Debug, Clone)]
pub enum Item {
    Event(Event),
    Snapshot(Snapshot),
    Footer(Footer),
}

pub struct Reader<R: Read> {
    input: R,
    pub header: Header,
    /// Set when the file ended inside a record or without a footer.
    pub warning: Option<String>,
    done: bool,
    seen_footer: bool,
    /// Reused payload buffer (no allocation per record).
    payload: Vec<u8>,
}

impl Reader<BufReader<File>> {
    pub fn open(path: &Path) -> Result<Self> {
        let f =
            File::open(path).with_context(|| format!("opening trace file {}", path.display()))?;
        Reader::new(BufReader::with_capacity(1 << 20, f))
            .with_context(|| format!("reading trace file {}", path.display()))
    }
}

/// Fills `buf`; Ok(false) on a clean EOF before the first byte.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "truncated")),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

impl<R: Read> Reader<R> {
    pub fn new(mut input: R) -> Result<Self> {
        let mut magic = [0u8; 8];
        if !read_full(&mut input, &mut magic)? || &magic != MAGIC {
            bail!("not a numatrace trace (bad magic); record one with `numatrace record -o FILE`");
        }
        let mut word = [0u8; 4];
        read_full(&mut input, &mut word).context("truncated header")?;
        let version = u32::from_le_bytes(word);
        if version != FORMAT_VERSION {
            bail!(
                "trace format version {version}, this numatrace reads version {FORMAT_VERSION}: \
                 use the numatrace release that recorded it"
            );
        }
        read_full(&mut input, &mut word).context("truncated header")?;
        let len = u32::from_le_bytes(word) as usize;
        if len > 64 << 20 {
            bail!("trace header claims {len} bytes: corrupt file");
        }
        let mut json = vec![0u8; len];
        if !read_full(&mut input, &mut json).unwrap_or(false) {
            bail!("trace file truncated inside its header: nothing to read");
        }
        let header: Header =
            serde_json::from_slice(&json).context("trace header is not valid JSON")?;
        if header.record_sizes != record_sizes() {
            bail!(
                "trace records have sizes {:?}, this numatrace expects {:?}: recorded by an incompatible build",
                header.record_sizes,
                record_sizes()
            );
        }
        Ok(Reader {
            input,
            header,
            warning: None,
            done: false,
            seen_footer: false,
            payload: Vec::new(),
        })
    }

    fn truncated(&mut self, what: &str) -> Option<Result<Item>> {
        self.done = true;
        self.warning = Some(format!(
            "trace truncated {what}: read up to the last complete record"
        ));
        None
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        if self.done {
            return None;
        }
        let mut head = [0u8; 5];
        match read_full(&mut self.input, &mut head) {
            Ok(true) => {}
            Ok(false) => {
                self.done = true;
                if !self.seen_footer {
                    self.warning =
                        Some("trace has no footer: the recording was interrupted".into());
                }
                return None;
            }
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                return self.truncated("inside a record header")
            }
            Err(e) => return Some(Err(e.into())),
        }
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > 64 << 20 {
            return self.truncated("(corrupt record length)");
        }
        let mut payload = std::mem::take(&mut self.payload);
        payload.resize(len, 0);
        let read = read_full(&mut self.input, &mut payload);
        let item = self.parse(head[0], &payload, read);
        self.payload = payload;
        item
    }
}

impl<R: Read> Reader<R> {
    fn parse(
        &mut self,
        tag: u8,
        payload: &[u8],
        read: std::io::Result<bool>,
    ) -> Option<Result<Item>> {
        let len = payload.len();
        match read {
            Ok(true) => {}
            Ok(false) if len == 0 => {}
            Ok(false) => return self.truncated("inside a record"),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                return self.truncated("inside a record")
            }
            Err(e) => return Some(Err(e.into())),
        }
        let item = match tag {
            TAG_FAULT | TAG_SCAN | TAG_SKIP => decode::decode(payload)
                .map(Item::Event)
                .map_err(anyhow::Error::from),
            TAG_SNAPSHOT => serde_json::from_slice(payload)
                .map(Item::Snapshot)
                .map_err(anyhow::Error::from),
            TAG_FOOTER => {
                self.seen_footer = true;
                serde_json::from_slice(payload)
                    .map(Item::Footer)
                    .map_err(anyhow::Error::from)
            }
            t => Err(anyhow::anyhow!("unknown record tag {t}")),
        };
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use numa_ebpf_common::Outcome;

    use super::*;
    use crate::decode::tests::fault;

    pub(crate) fn header() -> Header {
        Header {
            format_version: FORMAT_VERSION,
            numatrace_version: "test".into(),
            abi_version: 1,
            kernel_release: "6.12.0-test".into(),
            attach_plan: None,
            nodes: vec![],
            memory_tiers: vec![],
            tunables: system::Tunables::default(),
            numa_balancing: Some(2),
            params: None,
            started_unix_ns: 0,
            started_mono_ns: 0,
            attach_started_mono_ns: 0,
            sample_every: 1,
            stamp_entries: 1024,
            record_sizes: record_sizes(),
        }
    }

    fn sample_trace() -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), &header()).expect("writer");
        for i in 1..=3 {
            w.event(&Event::Fault(fault(i, i, 100 * i, Outcome::PromoteHot)))
                .expect("event");
        }
        w.snapshot(&Snapshot {
            ts_ns: 5,
            counters: vec![3],
            ..Default::default()
        })
        .expect("snap");
        w.finish(9, "duration").expect("finish")
    }

    fn read_all(bytes: &[u8]) -> (Vec<Item>, Option<String>) {
        let mut r = Reader::new(bytes).expect("reader");
        let items: Vec<Item> = r.by_ref().collect::<Result<_>>().expect("items");
        (items, r.warning)
    }

    #[test]
    fn roundtrip() {
        let (items, warning) = read_all(&sample_trace());
        assert_eq!(items.len(), 5);
        assert!(warning.is_none());
        assert!(matches!(&items[0], Item::Event(Event::Fault(f)) if f.seq_global == 1));
        assert!(matches!(&items[4], Item::Footer(f) if f.events == 3 && f.reason == "duration"));
    }

    #[test]
    fn truncated_file_reads_complete_records_and_warns() {
        let bytes = sample_trace();
        // Cut inside the second fault record.
        let cut = bytes.len() - 200;
        let (items, warning) = read_all(&bytes[..cut]);
        assert!(
            !items.is_empty() && items.len() < 5,
            "{} items",
            items.len()
        );
        assert!(warning.is_some_and(|w| w.contains("truncated")));
    }

    #[test]
    fn missing_footer_warns() {
        let mut w = Writer::new(Vec::new(), &header()).expect("writer");
        w.event(&Event::Fault(fault(1, 1, 1, Outcome::PromoteHot)))
            .expect("event");
        let bytes = w.out;
        let (items, warning) = read_all(&bytes);
        assert_eq!(items.len(), 1);
        assert!(warning.is_some_and(|w| w.contains("no footer")));
    }

    #[test]
    fn wrong_version_and_magic_are_clear_errors() {
        let mut bytes = sample_trace();
        bytes[8] = 99;
        let err = Reader::new(&bytes[..])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("format version 99"), "{err}");
        let err = Reader::new(&b"garbage!garbage"[..])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("not a numatrace trace"), "{err}");
    }

    #[test]
    fn truncated_header_is_an_error() {
        let bytes = sample_trace();
        let err = Reader::new(&bytes[..20])
            .err()
            .map(|e| format!("{e:#}"))
            .unwrap_or_default();
        assert!(err.contains("truncated"), "{err}");
    }
}
