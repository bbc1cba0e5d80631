//! `numatrace dump --format parquet`: one row per hint fault, its columns
//! typed, with the host, the kernel and the shadow models' verdicts as
//! columns, so that a fleet's files are queried together (DuckDB, Spark,
//! Trino: `read_parquet('fleet/*.parquet')`); with `--demotions`, one row
//! per demotion record instead, each with the ping-pong it ends.
//!
//! Rows are the records `numatrace stats` counts: those from the first
//! counter snapshot on (before it, the attach itself). Scan and VMA-skip
//! records are left out; the JSON dump has them.
use std::{path::Path, sync::Arc};

use anyhow::{bail, Context, Result};
use parquet::{
    basic::Compression,
    data_type::{BoolType, ByteArray, ByteArrayType, Int32Type, Int64Type},
    file::{properties::WriterProperties, writer::SerializedFileWriter},
    schema::parser::parse_message_type,
};

use numa_core::{
    decode::{comm, Event, Snapshot},
    model::{
        lifecycle::Lifecycle,
        policy::{build_all, KernelDefaults, ModelDefaults},
        shadow::FaultVerdicts,
    },
    sink::Sink,
    trace::Header,
};
use numa_ebpf_common::{demote_flags, tgid_of, DemoteEvent, FaultEvent};
use numa_host::fs::Output;

/// The file holds kernel addresses (`addr`, `folio`), as traces do.
const MODE: u32 = 0o600;

/// Rows per row group: a group's columns are held in memory until written
/// (about 250 bytes a row), and readers split work by group.
const ROW_GROUP: usize = 128 * 1024;

/// What a column holds, as Parquet types it.
#[derive(Debug, Clone, Copy)]
enum Kind {
    U64,
    U32,
    I32,
    Bool,
    Str,
    /// Nanoseconds since the Unix epoch, UTC.
    Time,
}

/// One value of a row; `Null` only in optional columns.
#[derive(Debug, Clone, Copy)]
enum Cell<'a> {
    U64(u64),
    U32(u32),
    I32(i32),
    Bool(bool),
    Str(&'a str),
    Null,
}

impl<'a> Cell<'a> {
    fn opt_u64(v: Option<u64>) -> Cell<'a> {
        v.map_or(Cell::Null, Cell::U64)
    }
    fn opt_u32(v: Option<u32>) -> Cell<'a> {
        v.map_or(Cell::Null, Cell::U32)
    }
    fn opt_bool(v: Option<bool>) -> Cell<'a> {
        v.map_or(Cell::Null, Cell::Bool)
    }
    fn opt_i32(v: Option<i32>) -> Cell<'a> {
        v.map_or(Cell::Null, Cell::I32)
    }
}

/// The fixed columns, in order: name, kind, whether it may be null. The
/// models' verdicts follow them (`model_<name>`, optional booleans).
const COLUMNS: &[(&str, Kind, bool)] = &[
    ("host", Kind::Str, false),
    ("kernel", Kind::Str, false),
    ("time", Kind::Time, false),
    ("ts_ns", Kind::U64, false),
    ("cpu", Kind::U32, false),
    ("pid", Kind::U32, false),
    ("tid", Kind::U32, false),
    ("comm", Kind::Str, false),
    ("cgroup_id", Kind::U64, false),
    ("addr", Kind::U64, false),
    ("folio", Kind::U64, false),
    ("pfn", Kind::U64, true),
    ("src_nid", Kind::I32, false),
    ("dst_nid", Kind::I32, false),
    ("dst_pfn", Kind::U64, true),
    ("nr_pages", Kind::U32, false),
    ("outcome", Kind::Str, false),
    ("decided", Kind::Bool, false),
    ("promoted", Kind::Bool, false),
    ("migrate_ok", Kind::Bool, true),
    ("scan_ns", Kind::U64, true),
    ("latency_ns", Kind::U64, true),
    ("fault_delta", Kind::U64, true),
    ("kernel_latency_ms", Kind::U32, true),
    ("threshold_ms", Kind::U32, true),
    ("seq_mm", Kind::U64, false),
    ("mm_fault_count", Kind::U32, true),
    ("late_end", Kind::Bool, false),
    ("thp", Kind::Bool, false),
    ("flags", Kind::U32, false),
    ("ext_flags", Kind::U64, false),
];

/// The cells of `f`'s fixed columns, in [`COLUMNS`]' order.
fn fault_cells<'a>(f: &FaultEvent, file: &'a FileFacts, comm: &'a str, out: &mut Vec<Cell<'a>>) {
    let stamped = f.has_stamp();
    // An unknown value counts as no decision, as in stats.
    let outcome = f.typed_outcome().name();
    out.extend([
        Cell::Str(&file.host),
        Cell::Str(&file.kernel),
        Cell::U64(file.unix_ns(f.ts_ns)),
        Cell::U64(f.ts_ns),
        Cell::U32(f.cpu),
        Cell::U32(f.tgid()),
        Cell::U32(f.tid()),
        Cell::Str(comm),
        Cell::U64(f.cgroup_id),
        Cell::U64(f.addr),
        Cell::U64(f.folio),
        Cell::opt_u64((f.src_pfn != 0).then_some(f.src_pfn)),
        Cell::I32(f.src_nid),
        Cell::I32(f.dst_nid),
        // The folio the promotion's migration allocated, if one was.
        Cell::opt_u64((f.dst_pfn != 0).then_some(f.dst_pfn)),
        Cell::U32(f.nr_pages),
        Cell::Str(outcome),
        Cell::Bool(f.decided()),
        // What stats counts as the kernel's promotions.
        Cell::Bool(f.decided() && f.kernel_promoted()),
        Cell::opt_bool(f.migrate_tried().then_some(f.migrated())),
        Cell::opt_u64(stamped.then_some(f.scan_ns)),
        // Stats' latency and fault-count delta, with its rules.
        Cell::opt_u64(stamped.then(|| f.ts_ns.saturating_sub(f.scan_ns))),
        Cell::opt_u64(
            (stamped && !f.stamp_other_mm()).then(|| f.seq_mm.saturating_sub(f.scan_seq_mm)),
        ),
        Cell::opt_u32(f.has_kernel_latency().then_some(f.kernel_latency_ms)),
        Cell::opt_u32(f.has_kernel_latency().then_some(f.threshold_ms)),
        Cell::U64(f.seq_mm),
        Cell::opt_u32(f.has_mm_fault_count().then_some(f.mm_fault_count)),
        Cell::Bool(f.late_end()),
        Cell::Bool(f.pmd_fault()),
        Cell::U32(u32::from(f.flags)),
        Cell::U64(f.ext_flags),
    ]);
}

/// The columns of a demotion row, in order (see [`COLUMNS`]).
const DEMOTE_COLUMNS: &[(&str, Kind, bool)] = &[
    ("host", Kind::Str, false),
    ("kernel", Kind::Str, false),
    ("time", Kind::Time, false),
    ("ts_ns", Kind::U64, false),
    ("pid", Kind::U32, false),
    ("tid", Kind::U32, false),
    ("reclaimer", Kind::Str, false),
    ("batch_end", Kind::Bool, false),
    ("src_nid", Kind::I32, false),
    ("dst_nid", Kind::I32, true),
    ("src_pfn", Kind::U64, true),
    ("dst_pfn", Kind::U64, true),
    ("mapping", Kind::U64, true),
    ("index", Kind::U64, true),
    ("nr_pages", Kind::U32, false),
    ("memcg_id", Kind::U64, true),
    ("pingpong_resident_ns", Kind::U64, true),
    ("promoted_by_pid", Kind::U32, true),
];

/// The cells of demotion record `d`, in [`DEMOTE_COLUMNS`]' order; `pp`
/// is the promotion it undid, if any (when the lifecycle samples, past its
/// bound of followed folios, a folio not followed has none).
fn demote_cells<'a>(
    d: &DemoteEvent,
    file: &'a FileFacts,
    pp: Option<numa_core::model::lifecycle::PingPong>,
    out: &mut Vec<Cell<'a>>,
) {
    let batch_end = d.flags & demote_flags::BATCH_END != 0;
    let folio = !batch_end;
    let placed = folio && d.dst_nid >= 0;
    let name = d.reclaimer_name();
    out.extend([
        Cell::Str(&file.host),
        Cell::Str(&file.kernel),
        Cell::U64(file.unix_ns(d.ts_ns)),
        Cell::U64(d.ts_ns),
        Cell::U32(tgid_of(d.pid_tgid)),
        Cell::U32(d.pid_tgid as u32),
        Cell::Str(name),
        Cell::Bool(batch_end),
        Cell::I32(d.src_nid),
        Cell::opt_i32(placed.then_some(d.dst_nid)),
        Cell::opt_u64(folio.then_some(d.src_pfn)),
        Cell::opt_u64(placed.then_some(d.dst_pfn)),
        Cell::opt_u64((folio && d.mapping != 0).then_some(d.mapping)),
        Cell::opt_u64((folio && d.mapping != 0).then_some(d.index)),
        Cell::U32(d.nr_pages),
        Cell::opt_u64((d.memcg_id != 0).then_some(d.memcg_id)),
        Cell::opt_u64(pp.map(|p| p.resident_ns)),
        Cell::opt_u32(pp.map(|p| p.tgid)),
    ]);
}

/// What every row of one file shares.
struct FileFacts {
    host: String,
    kernel: String,
    /// CLOCK_REALTIME minus CLOCK_MONOTONIC when the trace started.
    unix_offset_ns: i128,
}

impl FileFacts {
    /// Wall-clock time of a CLOCK_MONOTONIC timestamp.
    fn unix_ns(&self, mono_ns: u64) -> u64 {
        (i128::from(mono_ns) + self.unix_offset_ns).clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// A column's values not yet written; nulls only in `defined`.
enum Values {
    I64(Vec<i64>),
    I32(Vec<i32>),
    Bool(Vec<bool>),
    Bytes(Vec<ByteArray>),
}

struct Column {
    name: String,
    kind: Kind,
    /// Definition levels (1 value, 0 null) of an optional column.
    defined: Option<Vec<i16>>,
    values: Values,
}

impl Column {
    fn new(name: &str, kind: Kind, optional: bool) -> Column {
        let values = match kind {
            Kind::U64 | Kind::Time => Values::I64(Vec::new()),
            Kind::U32 | Kind::I32 => Values::I32(Vec::new()),
            Kind::Bool => Values::Bool(Vec::new()),
            Kind::Str => Values::Bytes(Vec::new()),
        };
        Column {
            name: name.to_owned(),
            kind,
            defined: optional.then(Vec::new),
            values,
        }
    }

    /// The column's line in the Parquet schema.
    fn schema(&self) -> String {
        let ty = match self.kind {
            Kind::U64 => "int64 {} (INTEGER(64,false))",
            Kind::U32 => "int32 {} (INTEGER(32,false))",
            Kind::I32 => "int32 {} (INTEGER(32,true))",
            Kind::Bool => "boolean {}",
            Kind::Str => "binary {} (STRING)",
            Kind::Time => "int64 {} (TIMESTAMP(NANOS,true))",
        };
        let rep = if self.defined.is_some() {
            "optional"
        } else {
            "required"
        };
        format!("{rep} {};", ty.replace("{}", &self.name))
    }

    fn push(&mut self, cell: Cell) -> Result<()> {
        if let Some(d) = &mut self.defined {
            d.push(i16::from(!matches!(cell, Cell::Null)));
        }
        // Unsigned values keep their bits in Parquet's signed physical
        // types; the logical type tells readers they are unsigned.
        match (&mut self.values, cell) {
            (_, Cell::Null) if self.defined.is_some() => {}
            (Values::I64(v), Cell::U64(x)) => v.push(x as i64),
            (Values::I32(v), Cell::U32(x)) => v.push(x as i32),
            (Values::I32(v), Cell::I32(x)) => v.push(x),
            (Values::Bool(v), Cell::Bool(x)) => v.push(x),
            (Values::Bytes(v), Cell::Str(s)) => v.push(ByteArray::from(s)),
            (_, cell) => bail!(
                "column {}: {cell:?} does not fit a {:?}",
                self.name,
                self.kind
            ),
        }
        Ok(())
    }

    fn len(&self) -> usize {
        match (&self.defined, &self.values) {
            (Some(d), _) => d.len(),
            (None, Values::I64(v)) => v.len(),
            (None, Values::I32(v)) => v.len(),
            (None, Values::Bool(v)) => v.len(),
            (None, Values::Bytes(v)) => v.len(),
        }
    }

    /// Writes the buffered values as this column's chunk of a row group
    /// and empties the buffer.
    fn write(&mut self, w: &mut parquet::file::writer::SerializedColumnWriter) -> Result<()> {
        let def = self.defined.as_deref();
        match &mut self.values {
            Values::I64(v) => w.typed::<Int64Type>().write_batch(v, def, None)?,
            Values::I32(v) => w.typed::<Int32Type>().write_batch(v, def, None)?,
            Values::Bool(v) => w.typed::<BoolType>().write_batch(v, def, None)?,
            Values::Bytes(v) => w.typed::<ByteArrayType>().write_batch(v, def, None)?,
        };
        match &mut self.values {
            Values::I64(v) => v.clear(),
            Values::I32(v) => v.clear(),
            Values::Bool(v) => v.clear(),
            Values::Bytes(v) => v.clear(),
        }
        if let Some(d) = &mut self.defined {
            d.clear();
        }
        Ok(())
    }
}

/// Buffers one row's cells, a column each.
fn push_row(columns: &mut [Column], cells: Vec<Cell>) -> Result<()> {
    for (c, cell) in columns.iter_mut().zip(cells) {
        c.push(cell)?;
    }
    Ok(())
}

/// Which records are the file's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Hint faults, with the shadow models' verdicts.
    Faults,
    /// Demotion records (folios and reclaim batches' ends), with the
    /// ping-pong each ends.
    Demotions,
}

/// The sink that writes the file: rows buffered per column, a row group
/// at a time.
pub struct ParquetSink {
    facts: FileFacts,
    rows_of: Rows,
    columns: Vec<Column>,
    models: FaultVerdicts,
    /// Promotions followed to the demotions that undo them (demotion rows).
    lifecycle: Lifecycle,
    toptier_mask: u64,
    writer: SerializedFileWriter<Output>,
    first_snapshot_ns: Option<u64>,
    rows: u64,
    /// Reused per row.
    verdicts: Vec<Option<bool>>,
}

impl ParquetSink {
    /// Starts `path` (a temporary file beside it until [`finish`]) for the
    /// `rows_of` records of a trace with `header`, from `host`.
    ///
    /// [`finish`]: Self::finish
    pub fn create(
        path: &Path,
        header: &Header,
        host: String,
        rows_of: Rows,
    ) -> Result<ParquetSink> {
        let k = KernelDefaults::from_host(&header.tunables, header.params.as_ref());
        let models = FaultVerdicts::new(build_all(&[], &ModelDefaults::default(), &k)?);
        let fixed = match rows_of {
            Rows::Faults => COLUMNS,
            Rows::Demotions => DEMOTE_COLUMNS,
        };
        let mut columns: Vec<Column> = fixed
            .iter()
            .map(|&(name, kind, optional)| Column::new(name, kind, optional))
            .collect();
        if rows_of == Rows::Faults {
            for name in models.names() {
                let name = format!("model_{}", name.replace('-', "_"));
                columns.push(Column::new(&name, Kind::Bool, true));
            }
        }
        let lines: Vec<String> = columns.iter().map(Column::schema).collect();
        let message = match rows_of {
            Rows::Faults => "fault",
            Rows::Demotions => "demotion",
        };
        let schema = parse_message_type(&format!("message {message} {{ {} }}", lines.join(" ")))
            .context("the Parquet schema")?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("numatrace {}", env!("CARGO_PKG_VERSION")))
            .build();
        let file = Output::create(path, MODE)?;
        let writer = SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props))?;
        Ok(ParquetSink {
            facts: FileFacts {
                host,
                kernel: header.kernel_release.clone(),
                unix_offset_ns: i128::from(header.started_unix_ns)
                    - i128::from(header.started_mono_ns),
            },
            rows_of,
            columns,
            models,
            lifecycle: Lifecycle::for_trace(header.params.as_ref(), header.map_plan.as_ref()),
            toptier_mask: header.params.as_ref().map_or(1, |p| p.toptier_mask),
            writer,
            first_snapshot_ns: None,
            rows: 0,
            verdicts: Vec::new(),
        })
    }

    fn fault(&mut self, f: &FaultEvent) -> Result<()> {
        if self.rows_of == Rows::Demotions {
            self.lifecycle.fault(f, self.toptier_mask);
            return Ok(());
        }
        self.models.fault(f, &mut self.verdicts);
        let name = comm(&f.comm);
        let mut cells = Vec::with_capacity(self.columns.len());
        fault_cells(f, &self.facts, &name, &mut cells);
        cells.extend(self.verdicts.iter().map(|&v| Cell::opt_bool(v)));
        push_row(&mut self.columns, cells)?;
        self.row_added()
    }

    fn demotion(&mut self, d: &DemoteEvent) -> Result<()> {
        if self.rows_of != Rows::Demotions {
            return Ok(());
        }
        let pp = self.lifecycle.demote(d);
        let mut cells = Vec::with_capacity(self.columns.len());
        demote_cells(d, &self.facts, pp, &mut cells);
        push_row(&mut self.columns, cells)?;
        self.row_added()
    }

    /// Counts the row just buffered; a full row group is written.
    fn row_added(&mut self) -> Result<()> {
        self.rows += 1;
        if self.columns[0].len() >= ROW_GROUP {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.columns[0].len() == 0 {
            return Ok(());
        }
        let mut group = self.writer.next_row_group()?;
        for c in &mut self.columns {
            let mut w = group
                .next_column()?
                .context("the Parquet writer has fewer columns than the schema")?;
            c.write(&mut w)?;
            w.close()?;
        }
        group.close()?;
        Ok(())
    }

    /// Writes the last rows and the footer and renames the file into
    /// place; returns the rows written.
    pub fn finish(mut self) -> Result<u64> {
        self.flush()?;
        self.writer.into_inner()?.commit()?;
        Ok(self.rows)
    }
}

impl Sink for ParquetSink {
    fn event(&mut self, ev: &Event) -> Result<()> {
        // The rows stats counts: nothing before the first snapshot.
        if self.first_snapshot_ns.is_some_and(|t| ev.ts_ns() < t) {
            return Ok(());
        }
        match ev {
            Event::Fault(f) => self.fault(f),
            Event::Demote(d) => self.demotion(d),
            // Only the fault rows' model verdicts read the scans.
            Event::Scan(s) if self.rows_of == Rows::Faults => {
                self.models.scan(s);
                Ok(())
            }
            Event::Scan(_) => Ok(()),
            Event::Skip(_) => Ok(()),
            // The rows are hint faults or demotions; a DAMON region is neither.
            Event::Damon(_) => Ok(()),
        }
    }

    fn snapshot(&mut self, s: &Snapshot) -> Result<()> {
        self.first_snapshot_ns.get_or_insert(s.ts_ns);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    /// A promotion, the demotion that undoes it 12 s later, a demotion of
    /// another folio and its batch's end: one row per demotion record,
    /// the first with its ping-pong.
    #[test]
    fn demotion_rows_carry_the_ping_pong_they_end() {
        use numa_core::{
            decode::fixtures::{demotion, fault, migrated},
            trace::{fixtures::header, Writer},
        };
        use numa_ebpf_common::Outcome;
        let dir = std::env::temp_dir().join(format!("numatrace-parquet-d-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let promotion = migrated(fault(1, 1, 5, Outcome::PromoteHot), 0xa1, 7);
        let demotion = |index: u64, flags: u32, nr_pages: u32| DemoteEvent {
            pid_tgid: 55 << 32 | 56,
            nr_pages,
            flags,
            ..demotion(promotion.ts_ns + 12_000_000_000, 0xa1, index)
        };
        let mut w = Writer::new(Vec::new(), &header()).expect("writer");
        for ev in [
            Event::Fault(promotion),
            Event::Demote(demotion(7, 0, 1)),
            Event::Demote(demotion(8, 0, 1)),
            Event::Demote(demotion(0, demote_flags::BATCH_END, 2)),
        ] {
            w.event(&ev).expect("event");
        }
        let trace = dir.join("d.trace");
        std::fs::write(&trace, w.finish(9, "duration").expect("finish")).expect("trace");
        let out = dir.join("d.parquet");
        let header = numa_core::trace::Reader::open(&trace)
            .expect("reader")
            .header;
        let mut sink =
            ParquetSink::create(&out, &header, "h1".into(), Rows::Demotions).expect("create");
        numa_source::Source::read_file(&trace, &mut [&mut sink], &mut |_| {}).expect("read");
        assert_eq!(sink.finish().expect("finish"), 3);
        let file = std::fs::File::open(&out).expect("parquet");
        let rows: Vec<String> = SerializedFileReader::new(file)
            .expect("a Parquet file")
            .get_row_iter(None)
            .expect("rows")
            .map(|r| r.expect("row").to_string())
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        for want in [
            "pid: 55",
            "tid: 56",
            "reclaimer: \"kswapd\"",
            "batch_end: false",
            "src_pfn: 9007",
            "dst_nid: 1",
            "pingpong_resident_ns: 12000000000",
            "promoted_by_pid: 42",
        ] {
            assert!(rows[0].contains(want), "{want} in {}", rows[0]);
        }
        assert!(
            rows[1].contains("pingpong_resident_ns: null"),
            "{}",
            rows[1]
        );
        for want in [
            "batch_end: true",
            "nr_pages: 2",
            "src_pfn: null",
            "mapping: null",
        ] {
            assert!(rows[2].contains(want), "{want} in {}", rows[2]);
        }
    }

    #[test]
    fn damaged_records_are_skipped_and_columns_typed() {
        let dir = std::env::temp_dir().join(format!("numatrace-parquet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let trace = dir.join("t.trace");
        std::fs::write(&trace, crate::dump::tests::damaged_trace()).expect("trace");
        let out = dir.join("t.parquet");
        let header = numa_core::trace::Reader::open(&trace)
            .expect("reader")
            .header;
        let mut sink =
            ParquetSink::create(&out, &header, "h1".into(), Rows::Faults).expect("create");
        numa_source::Source::read_file(&trace, &mut [&mut sink], &mut |_| {})
            .expect("a damaged record is skipped");
        assert_eq!(sink.finish().expect("finish"), 2);
        let file = std::fs::File::open(&out).expect("parquet");
        let reader = SerializedFileReader::new(file).expect("a Parquet file");
        let rows: Vec<String> = reader
            .get_row_iter(None)
            .expect("rows")
            .map(|r| r.expect("row").to_string())
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(rows.len(), 2);
        for want in [
            "host: \"h1\"",
            "kernel: \"6.12.0-test\"",
            "latency_ns: 5000000",
            "fault_delta: 1",
            "outcome: \"promote_hot\"",
            "promoted: true",
            "migrate_ok: null",
            "model_fault_count: true",
        ] {
            assert!(rows[0].contains(want), "{want} in {}", rows[0]);
        }
    }
}
