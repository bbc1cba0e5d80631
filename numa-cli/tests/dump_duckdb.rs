//! `numatrace dump --format parquet` read by a real DuckDB: its counts and
//! latency quantiles over the file equal `numatrace stats` on the same
//! trace, and the README's fleet query, run verbatim over two hosts'
//! files, equals `numatrace replay`'s fault-count model_only count.
#![allow(unused_crate_dependencies)] // a test crate sees every dependency of its package
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

use numa_core::model::log2::{bucket, upper_bound};
use serde_json::{json, Value};

const HOST: &str = "hot-chunks-6.12";
const OTHER_HOST: &str = "other-host";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("numa-cli is inside the workspace")
        .to_owned()
}

fn trace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/hot-chunks-6.12.trace")
}

/// The venv's python with the duckdb module, where `cargo xtask setup`
/// makes it: `duckdb-venv` in cargo's target directory
/// (`NUMATRACE_DUCKDB_PYTHON` names another python).
fn python() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), |dir| workspace().join(dir));
    let py = std::env::var_os("NUMATRACE_DUCKDB_PYTHON")
        .map_or_else(|| target.join("duckdb-venv/bin/python3"), PathBuf::from);
    let ok = Command::new(&py)
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "no python with the duckdb module at {}: `cargo xtask setup` creates it (a venv with pip's duckdb)",
        py.display()
    );
    py
}

/// Runs each named SQL query in DuckDB with `dir` as working directory;
/// every result is a list of rows.
fn duckdb(dir: &Path, queries: &Value) -> Value {
    const SCRIPT: &str = "import duckdb, json, sys\n\
        qs = json.loads(sys.argv[1])\n\
        con = duckdb.connect()\n\
        print(json.dumps({k: con.sql(q).fetchall() for k, q in qs.items()}, default=str))\n";
    let mut py = Command::new(python());
    py.current_dir(dir)
        .args(["-c", SCRIPT, &queries.to_string()]);
    serde_json::from_slice(&run_ok(&mut py).stdout).expect("duckdb's results as JSON")
}

/// Runs `cmd`, which must succeed.
fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn numatrace(args: &[&str]) -> Output {
    run_ok(Command::new(env!("CARGO_BIN_EXE_numatrace")).args(args))
}

fn json_of(args: &[&str]) -> Value {
    serde_json::from_slice(&numatrace(args).stdout).expect("JSON output")
}

/// A fresh directory with `fleet/` holding the trace dumped as two hosts.
fn fleet(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("numatrace-duckdb-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("fleet")).expect("temp dir");
    let t = trace();
    let t = t.to_str().expect("utf-8 path");
    let own = dir.join(format!("fleet/{HOST}.parquet"));
    let other = dir.join(format!("fleet/{OTHER_HOST}.parquet"));
    numatrace(&[
        "dump",
        t,
        "--format",
        "parquet",
        "-o",
        own.to_str().expect("utf-8"),
    ]);
    numatrace(&[
        "dump",
        t,
        "--format",
        "parquet",
        "--host",
        OTHER_HOST,
        "--output",
        other.to_str().expect("utf-8"),
    ]);
    dir
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The single value of a one-row, one-column result.
fn scalar(results: &Value, name: &str) -> u64 {
    u64_of(&results[name][0][0])
}

/// Stats' histogram rows as (upper bound in the recorded unit, count).
fn rows(stats: &Value, key: &str, unit: f64) -> Vec<(u64, u64)> {
    stats[key]
        .as_array()
        .unwrap_or_else(|| panic!("stats has no {key}"))
        .iter()
        .map(|r| {
            let le = r["le"].as_f64().expect("le") * unit;
            (le.round() as u64, u64_of(&r["count"]))
        })
        .collect()
}

/// `Log2Hist::quantile` over stats' rows: the upper bound of the bucket
/// holding rank `max(1, ceil(q n))`.
fn hist_quantile(rows: &[(u64, u64)], q: f64) -> u64 {
    let n: u64 = rows.iter().map(|r| r.1).sum();
    let rank = ((q * n as f64).ceil() as u64).max(1);
    let mut seen = 0;
    for &(le, c) in rows {
        seen += c;
        if seen >= rank {
            return le;
        }
    }
    panic!("rank {rank} beyond {n}");
}

const QUANTILES: [f64; 3] = [0.5, 0.9, 0.99];

/// The exact value at rank `max(1, ceil(q n))` of a column, which is the
/// rank stats' histogram quantile reads.
fn rank_query(col: &str, q: f64) -> String {
    format!(
        "WITH v AS (SELECT {col} AS x FROM read_parquet('fleet/{HOST}.parquet') WHERE {col} IS NOT NULL), \
         r AS (SELECT x, row_number() OVER (ORDER BY x) AS i, count(*) OVER () AS n FROM v) \
         SELECT x FROM r WHERE i = greatest(1, ceil({q} * n))"
    )
}

/// Cumulative counts at each of stats' bucket bounds: integer comparisons,
/// no floating-point log2 in SQL.
fn cumulative_query(col: &str, bounds: &[(u64, u64)]) -> String {
    let parts: Vec<String> = bounds
        .iter()
        .map(|(le, _)| format!("count(*) FILTER (WHERE {col} <= {le})"))
        .collect();
    format!(
        "SELECT {} FROM read_parquet('fleet/{HOST}.parquet')",
        parts.join(", ")
    )
}

#[test]
fn counts_and_quantiles_equal_stats() {
    let dir = fleet("stats");
    let t = trace();
    let stats = json_of(&["stats", t.to_str().expect("utf-8"), "--json"]);
    let latency = rows(&stats, "latency_ms", 1e6);
    let delta = rows(&stats, "fault_delta", 1.0);
    let one = format!("read_parquet('fleet/{HOST}.parquet')");
    let mut queries = json!({
        "rows": format!("SELECT count(*) FROM {one}"),
        "hosts": "SELECT count(DISTINCT host) FROM read_parquet('fleet/*.parquet')",
        "decided": format!("SELECT count(*) FROM {one} WHERE decided"),
        "promoted": format!("SELECT count(*) FROM {one} WHERE promoted"),
        "migrate_ok": format!("SELECT count(*) FROM {one} WHERE migrate_ok"),
        "migrate_fail": format!("SELECT count(*) FROM {one} WHERE NOT migrate_ok"),
        "outcomes": format!("SELECT outcome, count(*) FROM {one} GROUP BY outcome"),
        "latency_cum": cumulative_query("latency_ns", &latency),
        "delta_cum": cumulative_query("fault_delta", &delta),
    });
    for q in QUANTILES {
        queries[format!("latency_p{q}")] = rank_query("latency_ns", q).into();
    }
    let got = duckdb(&dir, &queries);
    assert_eq!(scalar(&got, "hosts"), 2);
    assert_eq!(scalar(&got, "rows"), u64_of(&stats["hint_faults"]));
    assert_eq!(scalar(&got, "decided"), u64_of(&stats["decisions"]));
    assert_eq!(scalar(&got, "promoted"), u64_of(&stats["kernel_promote"]));
    assert_eq!(
        scalar(&got, "migrate_ok"),
        u64_of(&stats["migrate"]["success"])
    );
    assert_eq!(
        scalar(&got, "migrate_fail"),
        u64_of(&stats["migrate"]["fail"])
    );
    check_outcomes(&got["outcomes"], &stats);
    check_cumulative(&got["latency_cum"][0], &latency, "latency");
    check_cumulative(&got["delta_cum"][0], &delta, "fault delta");
    // Stats keeps log2 histograms, so its quantiles are bucket upper
    // bounds: DuckDB's exact value at the same rank must fall in that
    // bucket. No tolerance: the bucket is the resolution stats has.
    for q in QUANTILES {
        let exact = scalar(&got, &format!("latency_p{q}"));
        assert_eq!(
            upper_bound(bucket(exact)),
            hist_quantile(&latency, q),
            "latency p{q}: DuckDB's {exact} ns"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every outcome's count equals stats' count of that reason.
fn check_outcomes(outcomes: &Value, stats: &Value) {
    let count = |name: &str| {
        outcomes
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r[0] == name)
            .map_or(0, |r| u64_of(&r[1]))
    };
    let expected = [
        ("reject_latency", &stats["kernel_reject"]["latency"]),
        ("reject_rate_limit", &stats["kernel_reject"]["rate_limit"]),
        ("reject_other", &stats["kernel_reject"]["other"]),
        ("promote_free_space", &stats["free_space_promote"]),
        ("not_tiering", &stats["not_tiering"]),
        ("no_decision", &stats["no_decision"]),
    ];
    let mut others = 0;
    for (name, want) in expected {
        assert_eq!(count(name), u64_of(want), "outcome {name}");
        others += u64_of(want);
    }
    // Stats has no promote_hot of its own: the rest of the hint faults.
    assert_eq!(
        count("promote_hot"),
        u64_of(&stats["hint_faults"]) - others,
        "outcome promote_hot"
    );
}

fn check_cumulative(got: &Value, rows: &[(u64, u64)], what: &str) {
    let mut cum = 0;
    for (i, (le, c)) in rows.iter().enumerate() {
        cum += c;
        assert_eq!(u64_of(&got[i]), cum, "{what} <= {le}");
    }
}

/// The query the README shows, exactly as it is there.
fn readme_query() -> String {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let start = readme.find("```sql\n").expect("README has a ```sql block") + "```sql\n".len();
    let len = readme[start..].find("```").expect("the block ends");
    readme[start..start + len].to_owned()
}

#[test]
fn the_readme_fleet_query_equals_replay() {
    let dir = fleet("readme");
    let t = trace();
    let replay = json_of(&["replay", t.to_str().expect("utf-8"), "--json"]);
    let model_only = replay["models"]
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["name"] == "fault-count")
        .map(|m| u64_of(&m["agreement"]["model_only"]))
        .expect("replay runs fault-count");
    let got = duckdb(&dir, &json!({ "fleet": readme_query() }));
    let rows = got["fleet"].as_array().expect("rows");
    let hosts: Vec<&str> = rows.iter().map(|r| r[0].as_str().expect("host")).collect();
    assert_eq!(hosts, [HOST, OTHER_HOST], "one row per host");
    for r in rows {
        assert_eq!(r[1], "6.12.117+deb12-amd64", "the trace's kernel");
        assert_eq!(u64_of(&r[2]), model_only, "{}: replay's model_only", r[0]);
    }
    assert!(model_only > 0, "the trace has promotions to add");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn parquet_needs_a_file() {
    for args in [
        &["--format", "parquet"][..],
        &["--format", "parquet", "-o", "-"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_numatrace"))
            .arg("dump")
            .arg(trace())
            .args(args)
            .output()
            .expect("run numatrace");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(out.stdout.is_empty(), "nothing binary on stdout");
        assert!(err.contains("-o FILE"), "{args:?}: the remedy: {err}");
    }
}

/// A synthetic trace: 50 promotions of folios (0xa1, 0..50), 20 of them
/// demoted again 12 s later, 10 demotions of folios never promoted, and
/// two reclaim batches' ends of 15 pages each.
fn demotion_trace(path: &Path) {
    use numa_core::{
        decode::{
            fixtures::{demotion, fault, migrated},
            Event,
        },
        trace::{fixtures::header, Writer},
    };
    use numa_ebpf_common::{demote_flags, DemoteEvent, Outcome};
    let mut w = Writer::new(Vec::new(), &header()).expect("writer");
    let mut last_ts = 0;
    for i in 0..50u64 {
        let f = migrated(fault(i + 1, i, 5, Outcome::PromoteHot), 0xa1, i);
        last_ts = f.ts_ns;
        w.event(&Event::Fault(f)).expect("fault");
    }
    let demoted = |i: u64, mapping: u64, flags: u32, nr_pages: u32| DemoteEvent {
        nr_pages,
        flags,
        ..demotion(last_ts + 12_000_000_000 + i, mapping, i)
    };
    for i in 0..30u64 {
        let mapping = if i < 20 { 0xa1 } else { 0xb2 };
        w.event(&Event::Demote(demoted(i, mapping, 0, 1)))
            .expect("demotion");
        if i % 15 == 14 {
            let end = demoted(i, 0, demote_flags::BATCH_END, 15);
            w.event(&Event::Demote(end)).expect("batch end");
        }
    }
    std::fs::write(path, w.finish(9, "duration").expect("finish")).expect("trace");
}

/// `dump --format parquet --demotions` read by DuckDB: a row per demotion
/// record, the batches' pages and the ping-pongs equal `stats`' on the
/// same trace.
#[test]
fn demotion_rows_equal_stats() {
    let dir = std::env::temp_dir().join(format!("numatrace-duckdb-demote-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let trace = dir.join("d.trace");
    demotion_trace(&trace);
    let t = trace.to_str().expect("utf-8 path");
    let out = dir.join("d.parquet");
    let out = out.to_str().expect("utf-8 path");
    numatrace(&["dump", t, "--format", "parquet", "--demotions", "-o", out]);
    let stats = json_of(&["stats", t, "--json"]);
    let r = duckdb(
        &dir,
        &json!({
            "rows": "SELECT count(*) FROM 'd.parquet'",
            "batch_pages": "SELECT sum(nr_pages) FROM 'd.parquet' WHERE batch_end",
            "pingpong": "SELECT count(pingpong_resident_ns) FROM 'd.parquet'",
            "resident_s": "SELECT min(pingpong_resident_ns) // 1000000000 FROM 'd.parquet'",
            "promoters": "SELECT count(DISTINCT promoted_by_pid) FROM 'd.parquet'",
        }),
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(scalar(&r, "rows"), 32);
    assert_eq!(
        scalar(&r, "batch_pages"),
        u64_of(&stats["demotions"]["pages"])
    );
    assert_eq!(scalar(&r, "batch_pages"), 30);
    assert_eq!(
        scalar(&r, "pingpong"),
        u64_of(&stats["lifecycle"]["pingpong"])
    );
    assert_eq!(scalar(&r, "pingpong"), 20);
    assert_eq!(scalar(&r, "resident_s"), 12);
    assert_eq!(scalar(&r, "promoters"), 1);
}

/// `--demotions` picks Parquet's rows: with the JSON dump it is refused,
/// saying why, before anything is written.
#[test]
fn demotions_without_parquet_is_refused_with_the_remedy() {
    let out = Command::new(env!("CARGO_BIN_EXE_numatrace"))
        .args(["dump", trace().to_str().expect("utf-8"), "--demotions"])
        .output()
        .expect("run numatrace");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && out.stdout.is_empty(), "{err}");
    assert!(err.contains("add --format parquet"), "{err}");
}
