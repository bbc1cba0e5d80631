use super::*;

/// Parameter types as BTF spells them, by function, as read from Debian's
/// 6.1.192, 6.12.117 and 7.2.13 images; present in kallsyms and traceable.
fn facts(version: &str) -> KernelFacts {
    const VMA: &str = "struct vm_area_struct *";
    const VMF: &str = "struct vm_fault *";
    const TLB: &str = "struct mmu_gather *";
    const PMD: &str = "pmd_t *";
    let mut functions = BTreeMap::new();
    let mut add = |name: &str, params: &[&str]| {
        let facts = FuncFacts {
            in_kallsyms: true,
            traceable: Some(true),
            btf_params: Some(params.iter().map(|s| (*s).to_owned()).collect()),
        };
        functions.insert(name.to_owned(), facts);
    };
    let int_ptr = "int *";
    match version {
        "6.1" => {
            add("numa_migrate_prep", &[PAGE, VMA, ULONG, INT, int_ptr]);
            add("should_numa_migrate_memory", &[TASK, PAGE, INT, INT]);
            add("page_cpupid_xchg_last", &[PAGE, INT]);
            add("migrate_misplaced_page", &[PAGE, VMA, INT]);
        }
        _ => {
            add(
                "numa_migrate_check",
                &[FOLIO, VMF, ULONG, int_ptr, "bool", int_ptr],
            );
            add("should_numa_migrate_memory", &[TASK, FOLIO, INT, INT]);
            add("folio_xchg_last_cpupid", &[FOLIO, INT]);
            if version == "7.2" {
                add("migrate_misplaced_folio", &[FOLIO, INT]);
                add(
                    "change_pte_range",
                    &[TLB, VMA, PMD, ULONG, ULONG, "pgprot_t", ULONG],
                );
            } else {
                add("migrate_misplaced_folio", &[FOLIO, VMA, INT]);
            }
        }
    }
    add("change_prot_numa", &[VMA, ULONG, ULONG]);
    add("task_numa_fault", &[INT, INT, INT, INT]);
    add("do_huge_pmd_numa_page", &[VMF]);
    add("init_numa_balancing", &[ULONG, TASK]);
    add("__mmdrop", &[MM]);
    add(
        "change_huge_pmd",
        &[TLB, VMA, PMD, ULONG, "pgprot_t", ULONG],
    );
    let mut tracepoints = BTreeSet::from([
        "migrate:mm_migrate_pages".to_owned(),
        "sched:sched_process_exit".to_owned(),
    ]);
    if version != "6.1" {
        tracepoints.insert("sched:sched_skip_vma_numa".to_owned());
    }
    KernelFacts {
        has_btf: true,
        fault_count_kernel: false,
        functions,
        tracepoints,
    }
}

fn target(plan: &AttachPlan, hook: Hook) -> (String, String, String) {
    let h = plan.hook(hook).expect("hook in plan");
    (
        h.target.clone().unwrap_or_default(),
        h.mechanism.map(Mechanism::name).unwrap_or("-").to_owned(),
        h.layout.clone().unwrap_or_default(),
    )
}

fn design(plan: &AttachPlan, hook: Hook) -> DesignFunction {
    plan.hook(hook)
        .and_then(|h| h.design.clone())
        .expect("hook has a design function")
}

#[test]
fn debian_6_1_uses_page_variants() {
    let plan = build(&facts("6.1"));
    assert!(plan.complete);
    assert_eq!(target(&plan, Hook::HintFault).0, "numa_migrate_prep");
    assert_eq!(
        target(&plan, Hook::Decision),
        (
            "should_numa_migrate_memory".into(),
            "fexit".into(),
            "page".into()
        )
    );
    assert_eq!(target(&plan, Hook::Migrate).0, "migrate_misplaced_page");
    assert_eq!(
        plan.hook(Hook::DecisionExchange).map(|h| h.status),
        Some(HookStatus::Unneeded)
    );
    assert_eq!(
        plan.hook(Hook::VmaSkip).map(|h| h.status),
        Some(HookStatus::Missing)
    );
    let detail = &plan.hook(Hook::HintFault).expect("hint").detail;
    assert!(
        detail.contains("numa_migrate_check inlined/absent"),
        "{detail}"
    );
    assert_eq!(
        design(&plan, Hook::Migrate).why_not,
        "migrate_misplaced_folio inlined/absent"
    );
}

#[test]
fn debian_6_12_uses_folio_variants_and_the_whole_scan_pass() {
    let plan = build(&facts("6.12"));
    assert!(plan.complete);
    assert_eq!(
        target(&plan, Hook::HintFault),
        ("numa_migrate_check".into(), "fentry".into(), "folio".into())
    );
    assert_eq!(
        target(&plan, Hook::Migrate),
        (
            "migrate_misplaced_folio".into(),
            "fexit".into(),
            "folio,args=3".into()
        )
    );
    assert_eq!(target(&plan, Hook::VmaSkip).1, "tracepoint");
    assert_eq!(
        target(&plan, Hook::ThreadExit).0,
        "sched:sched_process_exit"
    );
    assert_eq!(
        target(&plan, Hook::ScanRange),
        (
            "change_prot_numa".into(),
            "fexit".into(),
            "vma,start,end".into()
        )
    );
    // Inside change_prot_numa's pass: counted only.
    assert_eq!(target(&plan, Hook::ThpScan).2, "pmd");
    let scan = design(&plan, Hook::ScanRange);
    assert!(!scan.used);
    assert_eq!(scan.why_not, "change_pte_range inlined/absent");
    assert!(design(&plan, Hook::Decision).used);
    assert!(design(&plan, Hook::Migrate).used);
}

#[test]
fn debian_7_2_scans_per_page_table_where_change_pte_range_is_traceable() {
    let plan = build(&facts("7.2"));
    assert!(plan.complete);
    assert_eq!(
        target(&plan, Hook::ScanRange),
        ("change_pte_range".into(), "fexit".into(), PTE_RANGE.into())
    );
    assert!(design(&plan, Hook::ScanRange).used);
    assert_eq!(
        target(&plan, Hook::ThpScan),
        ("change_huge_pmd".into(), "fexit".into(), PMD_PASS.into())
    );
    assert_eq!(target(&plan, Hook::Migrate).2, "folio,args=2");
    let hint = design(&plan, Hook::HintFault);
    assert_eq!((hint.function.as_str(), hint.used), ("do_numa_page", false));
    assert_eq!(hint.why_not, "do_numa_page inlined/absent");
    // Where change_pte_range cannot be traced, the whole pass is used.
    let mut f = facts("7.2");
    if let Some(pte) = f.functions.get_mut("change_pte_range") {
        pte.traceable = Some(false);
    }
    let plan = build(&f);
    assert_eq!(target(&plan, Hook::ScanRange).0, "change_prot_numa");
    assert_eq!(target(&plan, Hook::ThpScan).2, "pmd");
    let scan = design(&plan, Hook::ScanRange);
    assert_eq!(scan.why_not, "change_pte_range not traceable");
}

#[test]
fn a_traceable_do_numa_page_is_no_candidate() {
    let mut f = facts("7.2");
    f.functions.insert(
        "do_numa_page".into(),
        FuncFacts {
            in_kallsyms: true,
            traceable: Some(true),
            btf_params: Some(vec!["struct vm_fault *".into()]),
        },
    );
    let plan = build(&f);
    assert_eq!(target(&plan, Hook::HintFault).0, "numa_migrate_check");
    let hint = design(&plan, Hook::HintFault);
    assert!(!hint.used);
    assert!(
        hint.why_not
            .contains("traceable, but its only argument is struct vm_fault *"),
        "{}",
        hint.why_not
    );
}

#[test]
fn a_candidate_whose_arguments_differ_is_not_attached() {
    let mut f = facts("7.2");
    // change_pte_range without cp_flags: the programs would read past it.
    if let Some(pte) = f.functions.get_mut("change_pte_range") {
        pte.btf_params = Some(vec!["struct vm_area_struct *".into(); 6]);
    }
    // numa_migrate_check taking the vm_fault first.
    if let Some(check) = f.functions.get_mut("numa_migrate_check") {
        check.btf_params = Some(vec!["struct vm_fault *".into(), ULONG.into()]);
    }
    let plan = build(&f);
    assert_eq!(target(&plan, Hook::ScanRange).0, "change_prot_numa");
    let scan = plan.hook(Hook::ScanRange).expect("scan_range");
    assert!(
        scan.detail
            .contains("argument 3 is struct vm_area_struct *, not long unsigned int")
            && scan.detail.contains("argument 6 is nothing"),
        "{}",
        scan.detail
    );
    let hint = plan.hook(Hook::HintFault).expect("hint_fault");
    assert_eq!(hint.status, HookStatus::Missing);
    assert!(!plan.complete);
    assert!(
        hint.detail
            .contains("numa_migrate_check has another signature (argument 0 is struct vm_fault *"),
        "{}",
        hint.detail
    );
}

#[test]
fn missing_required_hook_makes_plan_incomplete() {
    let mut f = facts("6.12");
    f.functions.remove("should_numa_migrate_memory");
    let plan = build(&f);
    assert!(!plan.complete);
    let h = plan.hook(Hook::Decision).expect("decision");
    assert_eq!(h.status, HookStatus::Missing);
    assert!(h
        .detail
        .contains("should_numa_migrate_memory inlined/absent"));
}

#[test]
fn no_btf_falls_back_to_kprobes() {
    let mut f = facts("6.12");
    f.has_btf = false;
    for func in f.functions.values_mut() {
        func.btf_params = None;
    }
    let plan = build(&f);
    assert!(plan.complete);
    assert_eq!(target(&plan, Hook::HintFault).1, "kprobe");
    assert_eq!(target(&plan, Hook::Decision).1, "kretprobe");
}

#[test]
fn plans_without_design_functions_still_deserialize() {
    let old = r#"{"hook":"hint_fault","target":"numa_migrate_check","mechanism":"fentry",
        "layout":"folio","required":true,"status":"attached","detail":""}"#;
    let h: PlannedHook = serde_json::from_str(old).expect("old plan entry");
    assert_eq!(h.design, None);
}

fn stat(name: &str, run_count: u64, run_time_ns: u64) -> ProgramStat {
    ProgramStat {
        name: name.to_owned(),
        run_count,
        run_time_ns,
        ns_per_run: 0.0,
        xlated_bytes: 0,
        jited_bytes: 0,
        runs_missed: 0,
    }
}

#[test]
fn scanner_cost_is_the_pass_programs_and_the_exchange_program_per_pte() {
    use numa_ebpf_common::programs as p;
    let programs = [
        stat(p::FENTRY_SCAN_RANGE, 10, 4_000),
        stat(p::FEXIT_SCAN_RANGE, 10, 6_000),
        stat(p::TP_SKIP_VMA, 5, 10_000),
        // The fault-count RFC's kernel: 1000 exchanges at 200 ns.
        stat(p::FENTRY_DECISION_XCHG, 1000, 200_000),
        // Fault-path programs are not the scanner's.
        stat(p::FENTRY_HINT_FAULT, 400, 280_000),
    ];
    let c = ScannerCost::of(&programs, 500).expect("a cost");
    assert_eq!(c.pass_ns_per_pte, 40.0);
    assert_eq!(c.exchange_ns_per_pte, 400.0);
    assert_eq!(c.ns_per_pte_at_most, 440.0);
    let c = ScannerCost::of(&programs[..3], 500).expect("a cost");
    assert_eq!((c.exchange_ns_per_pte, c.ns_per_pte_at_most), (0.0, 40.0));
}

#[test]
fn fault_path_cost_is_the_fault_programs_per_hint_fault() {
    use numa_ebpf_common::programs as p;
    let programs = [
        stat(p::FENTRY_HINT_FAULT, 400, 400_000),
        stat(p::FEXIT_DECISION, 400, 200_000),
        stat(p::FENTRY_FAULT_ACCOUNT, 400, 100_000),
        stat(p::TP_MIGRATE_PAGES, 100, 50_000),
        // The scanner's programs are not the fault path's.
        stat(p::FENTRY_SCAN_RANGE, 10, 1_000_000),
    ];
    let c = FaultPathCost::of(&programs, 400).expect("a cost");
    assert_eq!(c.hint_faults, 400);
    assert_eq!(c.runs_per_hint_fault, 3.25);
    assert_eq!(c.ns_per_hint_fault_at_most, 1875.0);
    assert_eq!(FaultPathCost::of(&programs, 0), None);
    assert_eq!(FaultPathCost::of(&[], 400), None);
}

#[test]
fn no_scanner_cost_without_run_statistics_or_protected_ptes() {
    use numa_ebpf_common::programs as p;
    assert_eq!(ScannerCost::of(&[], 500), None);
    assert_eq!(
        ScannerCost::of(&[stat(p::FENTRY_SCAN_RANGE, 1, 1)], 0),
        None
    );
}

#[test]
fn only_the_fault_count_kernel_gets_a_program_on_the_access_value_exchange() {
    for version in ["6.1", "6.12", "7.2"] {
        let plan = build(&facts(version));
        let h = plan.hook(Hook::DecisionExchange).expect("in the plan");
        assert_eq!(
            (h.status, h.target.as_deref()),
            (HookStatus::Unneeded, None)
        );
        assert!(!h.required && plan.complete, "{version}");
        assert!(h.detail.contains("scanner protects"), "{}", h.detail);
    }
    let mut rfc = facts("6.12");
    rfc.fault_count_kernel = true;
    let plan = build(&rfc);
    assert_eq!(
        target(&plan, Hook::DecisionExchange),
        (
            "folio_xchg_last_cpupid".into(),
            "fentry".into(),
            "folio".into()
        )
    );
}
