//! The trace file: a versioned, self-describing binary recording.
//!
//! ```text
//! "NUMATRC\0"  u32 format_version  u32 header_len  header (JSON)
//! records: u8 tag, u32 len, payload (len bytes)
//!   1 fault, 2 scan, 3 skip: the #[repr(C)] event bytes (native endian)
//!   4 snapshot: JSON `decode::Snapshot`
//!   5 footer: JSON `Footer`, last record of a complete file
//!   6 demotion, 7 DAMON region: the #[repr(C)] event bytes (native endian)
//! ```
//! A truncated file reads up to its last complete record, with a warning.
//! This module reads and writes the format on any `Read`/`Write`; the file
//! a run records into is created by numa-source (owner-only, exclusive,
//! never through a symlink).
use std::{
    fs::File,
    io::{BufReader, ErrorKind, Read, Write},
    path::Path,
};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::{
    decode::{self, Event, Snapshot},
    params::KernelParams,
    plan::AttachPlan,
    topology,
};

pub const MAGIC: &[u8; 8] = b"NUMATRC\0";
pub const FORMAT_VERSION: u32 = 1;

const TAG_FAULT: u8 = 1;
const TAG_SCAN: u8 = 2;
const TAG_SKIP: u8 = 3;
const TAG_SNAPSHOT: u8 = 4;
const TAG_FOOTER: u8 = 5;
const TAG_DEMOTE: u8 = 6;
const TAG_DAMON: u8 = 7;

/// Why the reader could not return a record. A plain value: the reader
/// meets one per damaged record, and the caller counts them and attaches
/// context once per run, so no backtrace or message is built per record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The input failed: the rest of the trace cannot be read.
    #[error("reading the trace: {0}")]
    Read(#[from] std::io::Error),
    /// A fault, scan or skip record that does not decode.
    #[error(transparent)]
    Decode(#[from] decode::DecodeError),
    /// A snapshot or footer that is not the JSON it should be.
    #[error("damaged snapshot or footer record: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unknown record tag {0}")]
    UnknownTag(u8),
}

impl RecordError {
    /// Whether this is one damaged record, which the reader has already
    /// passed by the length in its header, rather than a failing read.
    pub fn is_damaged_record(&self) -> bool {
        !matches!(self, RecordError::Read(_))
    }
}

/// Everything needed to interpret the events without the machine.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    pub format_version: u32,
    pub numatrace_version: String,
    pub abi_version: u32,
    pub kernel_release: String,
    /// The recording host's name (empty in traces from before it was
    /// recorded).
    #[serde(default)]
    pub hostname: String,
    /// The recording boot (`/proc/sys/kernel/random/boot_id`): ids that
    /// mean something only in that boot (cgroup ids) are looked up on the
    /// reading host only when it is still that boot. None in older traces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    pub attach_plan: Option<AttachPlan>,
    pub nodes: Vec<topology::Node>,
    pub memory_tiers: Vec<topology::MemoryTier>,
    pub tunables: topology::Tunables,
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
    /// The stamp array's budget, spans and sampling rate (absent in
    /// traces of the hash-map era: every folio followed).
    #[serde(default)]
    pub map_plan: Option<crate::mapplan::MapPlan>,
    /// The kernel's figure for all maps at attach (fdinfo memlock).
    #[serde(default)]
    pub map_bytes: u64,
    pub record_sizes: [usize; 3],
    /// Size of a demotion record (absent before they were recorded).
    #[serde(default)]
    pub demote_record_size: usize,
    /// Size of a DAMON region record (0 in traces of a numatrace that
    /// recorded none).
    #[serde(default)]
    pub damon_record_size: usize,
    /// numatrace's kdamond (`--truth damon`): what it monitored, how
    /// often, and its thread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damon: Option<crate::damon::Info>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Footer {
    pub ended_mono_ns: u64,
    pub events: u64,
    pub reason: String,
}

pub fn demote_record_size() -> usize {
    std::mem::size_of::<numa_ebpf_common::DemoteEvent>()
}

pub fn damon_record_size() -> usize {
    std::mem::size_of::<numa_ebpf_common::DamonEvent>()
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
            Event::Demote(_) => TAG_DEMOTE,
            Event::Damon(_) => TAG_DAMON,
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
    /// The records' layout when older than today's (see `decode::decode_old`).
    old: Option<decode::OldLayout>,
    /// Set when the file ended inside a record or without a footer, or
    /// held a damaged record (the first one's reason).
    pub warning: Option<String>,
    first_damaged: Option<String>,
    done: bool,
    seen_footer: bool,
    /// Records are decoded where they lie in this buffer: `buf[pos..end]`
    /// is read and not yet consumed (no copy or allocation per record).
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Offset in the input of `buf[0]`, for [`Reader::offset`].
    base: u64,
}

/// Bytes asked of the input at a time.
const READ_CHUNK: usize = 1 << 20;
/// Tag and length before every record's payload.
const RECORD_HEAD: usize = 5;

impl Reader<BufReader<File>> {
    pub fn open(path: &Path) -> Result<Self> {
        let f =
            File::open(path).with_context(|| format!("opening trace file {}", path.display()))?;
        Reader::new(BufReader::with_capacity(1 << 20, f))
            .with_context(|| format!("reading trace file {}", path.display()))
    }
}

/// Every node id a header names: nodes, tier members, the CPU -> node map.
fn header_node_ids(h: &Header) -> impl Iterator<Item = u32> + '_ {
    let nodes = h.nodes.iter().map(|n| n.id);
    let tiers = h.memory_tiers.iter().flat_map(|t| t.nodes.iter().copied());
    let cpus = h.params.iter().flat_map(|p| p.cpu_node.values().copied());
    nodes.chain(tiers).chain(cpus)
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
        let old = decode::OldLayout::of(header.abi_version, header.record_sizes);
        if header.abi_version != numa_ebpf_common::ABI_VERSION && old.is_none() {
            bail!(
                "trace records use layout version {}, this numatrace reads versions {} to {}: \
                 read it with the numatrace that recorded it ({})",
                header.abi_version,
                numa_ebpf_common::ABI_VERSION_V2,
                numa_ebpf_common::ABI_VERSION,
                crate::printable::printable(&header.numatrace_version)
            );
        }
        if let Some(id) = header_node_ids(&header).find(|&id| id >= topology::MAX_NUMNODES) {
            bail!(
                "trace header names node {id}: node ids are below {} (MAX_NUMNODES), \
                 so the header is corrupt or crafted",
                topology::MAX_NUMNODES
            );
        }
        if old.is_none()
            && (header.record_sizes != record_sizes()
                || header.demote_record_size != demote_record_size()
                // 0: written before DAMON records existed, so holds none.
                || ![0, damon_record_size()].contains(&header.damon_record_size))
        {
            bail!(
                "trace records have sizes {:?} (demotion {}, DAMON {}), this numatrace expects \
                 {:?} (demotion {}, DAMON {}): recorded by an incompatible build",
                header.record_sizes,
                header.demote_record_size,
                header.damon_record_size,
                record_sizes(),
                demote_record_size(),
                damon_record_size()
            );
        }
        Ok(Reader {
            input,
            header,
            old,
            warning: None,
            first_damaged: None,
            done: false,
            seen_footer: false,
            buf: Vec::new(),
            pos: 0,
            end: 0,
            base: (MAGIC.len() + 8 + len) as u64,
        })
    }

    /// Makes `n` bytes available at `buf[pos..]`; Ok(false) when the input
    /// ends first (fewer are available then).
    #[inline]
    fn fill(&mut self, n: usize) -> std::io::Result<bool> {
        if self.end - self.pos >= n {
            return Ok(true);
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        let want = n.max(READ_CHUNK);
        if self.buf.len() < want {
            self.buf.resize(want, 0);
        }
        while self.end < n {
            match self.input.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Bytes of the input read up to the end of the last record returned
    /// (the header included): progress through a trace file of known size.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn truncated(&mut self, what: &str) -> Option<Result<Item, RecordError>> {
        self.done = true;
        self.warning = Some(format!(
            "trace truncated {what}: read up to the last complete record"
        ));
        None
    }
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Item, RecordError>;

    /// The next record; at the end, the first damaged record's reason
    /// joins the warning (once per run: the record path stays cheap).
    #[inline]
    fn next(&mut self) -> Option<Result<Item, RecordError>> {
        let item = self.read_record();
        match &item {
            Some(Err(e)) if e.is_damaged_record() && self.first_damaged.is_none() => {
                self.first_damaged = Some(format!(
                    "the first damaged record (ending at byte {}): {e}",
                    self.offset()
                ));
            }
            None => {
                if let Some(d) = self.first_damaged.take() {
                    self.warning = Some(match self.warning.take() {
                        Some(w) => format!("{w}; {d}"),
                        None => d,
                    });
                }
            }
            _ => {}
        }
        item
    }
}

impl<R: Read> Reader<R> {
    #[inline]
    fn read_record(&mut self) -> Option<Result<Item, RecordError>> {
        if self.done {
            return None;
        }
        match self.fill(RECORD_HEAD) {
            Ok(true) => {}
            Ok(false) if self.pos == self.end => {
                self.done = true;
                if !self.seen_footer {
                    self.warning =
                        Some("trace has no footer: the recording was interrupted".into());
                }
                return None;
            }
            Ok(false) => return self.truncated("inside a record header"),
            Err(e) => return Some(Err(e.into())),
        }
        let head = &self.buf[self.pos..self.pos + RECORD_HEAD];
        let tag = head[0];
        let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
        if len > 64 << 20 {
            return self.truncated("(corrupt record length)");
        }
        match self.fill(RECORD_HEAD + len) {
            Ok(true) => {}
            Ok(false) => return self.truncated("inside a record"),
            Err(e) => return Some(Err(e.into())),
        }
        let start = self.pos + RECORD_HEAD;
        self.pos = start + len;
        let payload = &self.buf[start..start + len];
        let item = match tag {
            TAG_FAULT | TAG_SCAN | TAG_SKIP if self.old.is_some() => {
                decode::decode_old(payload, self.old)
                    .map(Item::Event)
                    .map_err(Into::into)
            }
            TAG_FAULT | TAG_SCAN | TAG_SKIP | TAG_DEMOTE | TAG_DAMON => {
                decode::decode(payload).map(Item::Event).map_err(Into::into)
            }
            TAG_SNAPSHOT => serde_json::from_slice(payload)
                .map(Item::Snapshot)
                .map_err(Into::into),
            TAG_FOOTER => {
                self.seen_footer = true;
                serde_json::from_slice(payload)
                    .map(Item::Footer)
                    .map_err(Into::into)
            }
            t => Err(RecordError::UnknownTag(t)),
        };
        Some(item)
    }
}

/// Trace builders for tests and benchmarks.
pub mod fixtures {
    use super::*;

    /// A header of this numatrace's record layout for a synthetic trace
    /// (no host facts, 1024 stamp entries, every event recorded).
    pub fn header() -> Header {
        Header {
            format_version: FORMAT_VERSION,
            numatrace_version: "test".into(),
            abi_version: numa_ebpf_common::ABI_VERSION,
            kernel_release: "6.12.0-test".into(),
            hostname: "test-host".into(),
            boot_id: None,
            attach_plan: None,
            nodes: vec![],
            memory_tiers: vec![],
            tunables: topology::Tunables::default(),
            numa_balancing: Some(2),
            params: None,
            started_unix_ns: 0,
            started_mono_ns: 0,
            attach_started_mono_ns: 0,
            sample_every: 1,
            stamp_entries: 1024,
            map_plan: None,
            map_bytes: 0,
            record_sizes: record_sizes(),
            demote_record_size: demote_record_size(),
            damon_record_size: damon_record_size(),
            damon: None,
        }
    }
}

#[cfg(test)]
mod tests;
