use std::path::PathBuf;

use super::*;

/// A directory standing in for `/`, removed on drop.
struct FakeRoot(PathBuf);

impl FakeRoot {
    /// A host ready for numatrace: root, 6.12 with BTF and tracefs,
    /// tiering on, DRAM above a slow tier, no lockdown.
    fn ready(tag: &str) -> FakeRoot {
        let dir =
            std::env::temp_dir().join(format!("numatrace-preflight-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let r = FakeRoot(dir);
        r.put(
            "proc/self/status",
            "Name:\tnumatrace\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n",
        );
        r.put("proc/sys/kernel/osrelease", "6.12.48+deb13-amd64\n");
        r.put("sys/kernel/btf/vmlinux", "BTF");
        r.put("sys/kernel/tracing/available_events", "");
        r.put(
            "sys/kernel/security/lockdown",
            "[none] integrity confidentiality\n",
        );
        r.put("proc/sys/kernel/numa_balancing", "2\n");
        r.put(
            "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
            "0\n",
        );
        r.put(
            "sys/devices/virtual/memory_tiering/memory_tier22/nodelist",
            "1\n",
        );
        r
    }

    fn put(&self, rel: &str, text: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().expect("a parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    }

    fn remove(&self, rel: &str) {
        std::fs::remove_file(self.0.join(rel)).expect("remove");
    }

    fn findings(&self) -> Findings {
        decide(&HostFacts::read(&self.0))
    }
}

impl Drop for FakeRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn names(checks: &[Check]) -> Vec<&str> {
    checks.iter().map(|c| c.name.as_ref()).collect()
}

#[test]
fn a_ready_host_passes_without_a_word() {
    let r = FakeRoot::ready("ready");
    let f = HostFacts::read(&r.0);
    assert_eq!((f.euid, f.numa_balancing), (Some(0), Some(2)));
    assert!(f.has_btf && f.tracefs.is_some() && privileged(&f));
    let v = r.findings();
    assert!(v.fatal.is_empty(), "{:?}", v.fatal);
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
}

#[test]
fn balancing_without_tiering_is_one_warning_line() {
    let r = FakeRoot::ready("balancing");
    r.put("proc/sys/kernel/numa_balancing", "1");
    let v = r.findings();
    assert!(v.fatal.is_empty(), "{:?}", v.fatal);
    assert_eq!(names(&v.warnings), ["numa_balancing"]);
    let line = one_line(&v.warnings[0]);
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains("nothing will be promoted"), "{line}");
    assert!(line.contains("sysctl -w kernel.numa_balancing=2"), "{line}");
}

/// Balancing off: no hint faults, every figure a silent 0, so attaching
/// stops with the remedy.
#[test]
fn balancing_off_or_missing_stops_an_attaching_command() {
    let r = FakeRoot::ready("balancing-off");
    r.put("proc/sys/kernel/numa_balancing", "0");
    let v = r.findings();
    assert_eq!(names(&v.fatal), ["numa_balancing"]);
    assert!(v.warnings.is_empty(), "{:?}", v.warnings);
    let line = one_line(&v.fatal[0]);
    assert!(line.contains("takes no hint faults"), "{line}");
    assert!(line.contains("sysctl -w kernel.numa_balancing=2"), "{line}");
    r.remove("proc/sys/kernel/numa_balancing");
    let v = r.findings();
    assert_eq!(names(&v.fatal), ["numa_balancing"]);
    assert!(one_line(&v.fatal[0]).contains("CONFIG_NUMA_BALANCING"));
}

#[test]
fn one_memory_tier_is_a_warning() {
    let r = FakeRoot::ready("tiers");
    r.remove("sys/devices/virtual/memory_tiering/memory_tier22/nodelist");
    let v = r.findings();
    assert!(v.fatal.is_empty(), "{:?}", v.fatal);
    assert_eq!(names(&v.warnings), ["memory_tiers"]);
    assert!(one_line(&v.warnings[0]).contains("nothing will be promoted"));
}

#[test]
fn without_btf_nothing_attaches() {
    let r = FakeRoot::ready("btf");
    r.remove("sys/kernel/btf/vmlinux");
    let v = r.findings();
    assert_eq!(names(&v.fatal), ["btf"]);
    let line = one_line(&v.fatal[0]);
    assert!(line.contains("nbp_threshold"), "{line}");
    assert!(line.contains("CONFIG_DEBUG_INFO_BTF=y"), "{line}");
}

#[test]
fn without_privileges_nothing_attaches_and_the_advice_is_honest() {
    let r = FakeRoot::ready("privileges");
    r.put(
        "proc/self/status",
        "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t0000000000000000\n",
    );
    let v = r.findings();
    assert_eq!(names(&v.fatal), ["privileges"]);
    let line = one_line(&v.fatal[0]);
    assert!(line.contains("euid 1000"), "{line}");
    assert!(line.contains("sudo"), "{line}");
    assert!(
        line.contains("CAP_BPF") && line.contains("CAP_PERFMON"),
        "{line}"
    );
    assert!(line.contains("kernel memory"), "{line}");
    assert!(!line.contains("setcap"), "{line}");
    // CAP_BPF (39) and CAP_PERFMON (38) without root suffice.
    r.put(
        "proc/self/status",
        "Uid:\t1000\t1000\t1000\t1000\nCapEff:\t000000c000000000\n",
    );
    assert!(r.findings().fatal.is_empty());
}

#[test]
fn lockdown_confidentiality_stops_integrity_does_not() {
    let r = FakeRoot::ready("lockdown");
    r.put(
        "sys/kernel/security/lockdown",
        "none integrity [confidentiality]\n",
    );
    let v = r.findings();
    assert_eq!(names(&v.fatal), ["lockdown"]);
    assert!(one_line(&v.fatal[0]).contains("lockdown="), "{:?}", v.fatal);
    r.put(
        "sys/kernel/security/lockdown",
        "none [integrity] confidentiality\n",
    );
    let v = r.findings();
    assert!(v.fatal.is_empty() && v.warnings.is_empty(), "{v:?}");
    // No securityfs: lockdown is unknown, the load itself will tell.
    r.remove("sys/kernel/security/lockdown");
    assert!(r.findings().fatal.is_empty());
}

#[test]
fn a_kernel_without_tiering_stops() {
    let r = FakeRoot::ready("kernel");
    r.put("proc/sys/kernel/osrelease", "5.10.0-28-amd64\n");
    let v = r.findings();
    assert_eq!(names(&v.fatal), ["kernel"]);
    assert!(one_line(&v.fatal[0]).contains("5.18"));
}
