//! The oracle of stub detection: what `cuobjdump -sass` shows of each function's first
//! instructions, read as docs/ARCH_RULES.md section 10 says. `tests/tests/it/audit/stubs.rs` and
//! `cargo xtask bench stubs` compare fatkit's reading of the code (`fatkit_fatbin::body`)
//! with it, function by function.

/// The instructions that do no work a launch is for (docs/ARCH_RULES.md section 10): register
/// moves and arithmetic, constant and special-register reads, the thread's own stack (`STL`,
/// where `printf` puts its arguments), a call's return address and the call of `vprintf` or
/// `__assertfail` (`CALL.ABS.NOINC`), by mnemonic as the disassembler prints it.
const NO_WORK: &[&str] = &[
    "MOV",
    "IMAD",
    "IADD3",
    "IADD",
    "VIADD",
    "HFMA2",
    "CS2R",
    "LDC",
    "LDCU",
    "ULDC",
    "S2R",
    "S2UR",
    "LEPC",
    "STL",
    "NOP",
    "ISETP",
    "CALL.ABS.NOINC",
];

/// Each function of `sass` (`cuobjdump -elf -sass`: `arch = sm_XX` headers, each ELF's
/// `.nv.info.NAME` blocks with their `externs:` lines, then `Function : name` and one
/// instruction a line) as `(arch, function, body)`, in order: `returns` or `traps` where
/// nothing but `NO_WORK`, never-executed (`@!PT`) instructions and conditional `EXIT`s (the
/// threads they end do nothing) come before an `EXIT` or a `BPT.TRAP`, else `code` (any other
/// conditional instruction is code). A function whose externs hold `__assertfail` and that
/// made a call traps at its `EXIT`: the call does not return.
pub fn bodies(sass: &str) -> Vec<(String, String, &'static str)> {
    let mut out = Vec::new();
    let (mut arch, mut function, mut decided) = (String::new(), None::<String>, false);
    let (mut info, mut asserting) = (None::<String>, std::collections::BTreeSet::new());
    let mut called = false;
    for line in sass.lines() {
        let t = line.trim();
        if let Some(a) = t.strip_prefix("arch = ") {
            arch = a.to_owned();
            asserting.clear();
            continue;
        }
        if let Some(f) = line.strip_prefix(".nv.info.") {
            info = Some(f.trim().to_owned());
            continue;
        }
        if let (Some(f), Some(list)) = (&info, t.strip_prefix("Value:")) {
            if list.contains("externs:") && list.contains("__assertfail(") {
                asserting.insert(f.clone());
            }
            continue;
        }
        if let Some(f) = t.strip_prefix("Function : ") {
            function = Some(f.to_owned());
            (decided, called, info) = (false, false, None);
            continue;
        }
        let (Some(f), false, true) = (&function, decided, t.starts_with("/*")) else {
            continue;
        };
        // `/*0010*/   EXIT ;   /* 0x... */`
        let Some(ins) = t.split("*/").nth(1) else {
            continue;
        };
        let ins = ins.split(';').next().unwrap_or(ins).trim();
        if ins.is_empty() || ins.starts_with("@!PT") || ins == "NOP" {
            continue;
        }
        if ins.starts_with('@') && ins.ends_with(" EXIT") {
            continue;
        }
        let mnemonic = ins.split_whitespace().next().unwrap_or(ins);
        called |= mnemonic == "CALL.ABS.NOINC";
        if NO_WORK
            .iter()
            .any(|m| mnemonic == *m || mnemonic.starts_with(&format!("{m}.")))
        {
            continue;
        }
        let body = match ins {
            "EXIT" if called && asserting.contains(f) => "traps",
            "EXIT" => "returns",
            _ if ins.starts_with("BPT.TRAP") => "traps",
            _ => "code",
        };
        out.push((arch.clone(), f.clone(), body));
        decided = true;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_what_cuobjdump_prints() {
        let sass = "arch = sm_70\n\t\tFunction : k\n        /*0000*/    MOV R1, c[0x0][0x28] ;  /* 0x00000a0000017a02 */\n        /*0010*/ @!PT SHFL.IDX PT, RZ, RZ, RZ, RZ ; /* 0x000000fffffff389 */\n        /*0020*/    EXIT ;  /* 0x000000000000794d */\n\t\tFunction : t\n        /*0000*/    BPT.TRAP 0x1 ;  /* 0x000000040000795c */\n\t\tFunction : b\n        /*0000*/    S2R R0, SR_TID.X ;  /* 0x0000000000007919 */\n        /*0010*/ @P0 EXIT ;  /* 0x000000000000094d */\n        /*0020*/    STG.E [R2.64], R0 ;  /* 0x0000000002007986 */\n";
        let got: Vec<(String, String, &str)> = super::bodies(sass);
        let want: Vec<(String, String, &str)> = [("k", "returns"), ("t", "traps"), ("b", "code")]
            .map(|(f, b)| ("sm_70".to_owned(), f.to_owned(), b))
            .to_vec();
        assert_eq!(got, want);
        // `-elf -sass`: a kernel whose externs hold `__assertfail` traps after its call; one
        // calling `vprintf` returns, one thread printing behind `@P0 EXIT` too.
        let elf = "arch = sm_90\n.nv.info.a\n\tAttribute:\tEIATTR_EXTERNS\n\tValue:\texterns:\t__assertfail(0x16)\t\n.nv.info.p\n\tValue:\texterns:\tvprintf(0x18)\t\n\tcode for sm_90\n\t\tFunction : a\n        /*0000*/    LEPC R20, 0x110 ;\n        /*0010*/    CALL.ABS.NOINC R2 ;\n        /*0020*/    EXIT ;\n\t\tFunction : p\n        /*0000*/    ISETP.NE.AND P0, PT, R0, RZ, PT ;\n        /*0010*/ @P0 EXIT ;\n        /*0020*/    CALL.ABS.NOINC R2 ;\n        /*0030*/    EXIT ;\n";
        let got: Vec<(String, String, &str)> = super::bodies(elf);
        let want: Vec<(String, String, &str)> = [("a", "traps"), ("p", "returns")]
            .map(|(f, b)| ("sm_90".to_owned(), f.to_owned(), b))
            .to_vec();
        assert_eq!(got, want);
    }
}
