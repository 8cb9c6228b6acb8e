//! Whether a kernel's code does anything: a kernel whose body was compiled out for a target
//! (`#if __CUDA_ARCH__ >= 800` around it, `NO_DEVICE_CODE`, a `__trap()` in the `#else`) is,
//! in that image, a stub: it returns at once, or traps, and nothing else
//! (docs/ARCH_RULES.md section 10).
//!
//! Read from the code itself, never guessed: a stub is a body that does no work before it
//! returns or traps. It moves registers, reads constants, writes the arguments of a `printf`
//! to its own stack and calls `vprintf` or `__assertfail`, and nothing else: no store to
//! global or shared memory, no atomic, no branch, nothing conditional.
//! - a cubin of the Volta-and-later instruction set (CC 7.0 to 12.x: 16-byte instructions, the
//!   opcode in bits 0..12 and the guard predicate in bits 12..16 of the first word): every
//!   instruction from the kernel's start, never-executed (`@!PT`) ones aside, must be one of
//!   `NO_WORK` (the opcodes nvcc 11.8 to 13.2 write for `printf`, `assert` and a stack set-up,
//!   measured with nvdisasm), a `CALL.ABS` only where the kernel calls nothing but `vprintf` and
//!   `__assertfail` ([`Calls`]), or a conditional `EXIT` (`@P0 EXIT`: the threads it ends do
//!   nothing, the others read on), until an unconditional `EXIT` or `BPT.TRAP`. A kernel that
//!   calls `__assertfail` traps: the call does not return (710 on an H200, section 10).
//! - Maxwell and Pascal (CC 5.x, 6.x: 8-byte instructions, every fourth word a scheduling
//!   word): a stack-pointer set-up and `NOP`s before `EXIT` or `BPT`. Kepler and unknown majors
//!   are not read.
//! - PTX: an entry whose body, directives and comments aside, holds only register moves,
//!   address conversions, stores to its own stack or a call's parameters and calls of `vprintf`
//!   or `__assertfail` before `ret;`, `exit;`, `trap;`, `brkpt;` or its end.
//!
//! Only a few instructions or bytes are read per kernel: the cost is linear in the kernels.

use fatkit_arch::load::Stub;
use fatkit_arch::Cc;

/// What a kernel's code is, as far as it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body {
    /// Something other than returning or trapping comes first.
    Code,
    /// Nothing but a return (or a trap) is ever executed.
    Empty(Stub),
}

/// How many instructions of a kernel are read before it counts as having a body (llama.cpp's
/// `NO_DEVICE_CODE`, a `printf` of five arguments then a trap, is 28).
pub(crate) const MAX_INSTRUCTIONS: usize = 96;

/// The Volta-and-later opcodes (bits 0..12, operand forms apart) that do no work a launch
/// could be for: register moves and arithmetic (`MOV`, `IMAD.MOV`, `IADD3`, `IADD`, `VIADD`,
/// `HFMA2` as a move, `CS2R`), constant and special-register reads (`LDC`, `LDCU`, `ULDC`,
/// `S2R`, `S2UR`), `LEPC` (a call's return address), `STL` (the thread's own stack, where
/// `printf` puts its arguments), `ISETP` (a predicate, for a conditional `EXIT`) and `NOP`.
/// Measured on nvcc 11.8 (sm_70) and 13.0 to 13.2 (sm_75 to sm_120) for llama.cpp's
/// `NO_DEVICE_CODE`, CUTLASS's printf-and-trap and printf-and-return, PyTorch's one-thread
/// printf and `assert(false)` (docs/ARCH_RULES.md section 10).
const NO_WORK: &[u64] = &[
    0x202, 0x802, 0xa02, 0xc02, // MOV
    0x224, 0x424, 0x624, 0xc24, 0xe24, // IMAD (.MOV, .X, .U32)
    0x210, 0x810, 0xa10, 0xc10, // IADD3 (.X)
    0x835, 0xc35, 0x836, // IADD (.64), VIADD
    0x431, 0x435, 0x805, // HFMA2 (.MMA), CS2R
    0xb82, 0x7ac, 0xab9, 0x919, 0x9c3, // LDC, LDCU, ULDC, S2R, S2UR
    0x34e, 0x94e, 0x387, 0x918, // LEPC, STL, NOP
    0x20c, 0x80c, 0xa0c, 0xc0c, // ISETP (register, immediate, constant, uniform)
];

/// `EXIT`, `BPT`.
const EXIT: u64 = 0x94d;
const BPT: u64 = 0x95c;

/// `CALL.ABS` (a call through a register, to an address from constant bank 4).
const CALL_ABS: u64 = 0x343;

/// What a kernel's code may call: `printf` (`vprintf`) and `assert` (`__assertfail`) are no
/// work a launch is for; anything else may be. Read from the kernel's own `EIATTR_EXTERNS`
/// where its `.nv.info` holds one, else from the module's undefined functions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Calls {
    /// It calls nothing but `vprintf` and `__assertfail` (or nothing at all).
    pub only_print_or_assert: bool,
    /// A call made traps: the kernel calls `__assertfail` (a stub's code has no branch, so
    /// every call in it is made), or the module calls it and not `vprintf`.
    pub call_traps: bool,
}

/// Whether `cc`'s instruction set is one [`cubin`] reads.
pub(crate) fn reads_cubins_of(cc: Cc) -> bool {
    matches!(cc.major, 5..=12)
}

/// The body of a kernel whose code starts at `code` (its bytes, from the symbol's value), for
/// a cubin of `cc`. `None` where the instruction set is not one fatkit reads.
pub fn cubin(code: &[u8], cc: Cc, calls: Calls) -> Option<Body> {
    match cc.major {
        7..=12 => Some(volta(code, calls)),
        5 | 6 => Some(maxwell(code)),
        _ => None,
    }
}

fn word(bytes: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// Volta to Blackwell: 16 bytes per instruction; `EXIT`, `BPT`, the rest of [`NO_WORK`] and
/// `CALL.ABS` read on; guard `PT` 7, `!PT` 15 (never executed), any other a predicate.
fn volta(code: &[u8], calls: Calls) -> Body {
    let mut called = false;
    for i in 0..MAX_INSTRUCTIONS {
        let Some(lo) = word(code, i * 16) else {
            return Body::Code;
        };
        let (opcode, guard) = (lo & 0xfff, (lo >> 12) & 0xf);
        if guard == 0xf {
            continue; // @!PT: never executed
        }
        if guard != 0x7 {
            if opcode == EXIT {
                continue; // the threads it ends did nothing; the others read on
            }
            return Body::Code; // conditional: something decides
        }
        match opcode {
            // An assert's call does not return: the kernel traps.
            EXIT if called && calls.call_traps => return Body::Empty(Stub::Traps),
            EXIT => return Body::Empty(Stub::Returns),
            BPT => return Body::Empty(Stub::Traps),
            CALL_ABS if calls.only_print_or_assert => called = true,
            op if NO_WORK.contains(&op) => {}
            _ => return Body::Code,
        }
    }
    Body::Code
}

/// Maxwell and Pascal: 32-byte bundles of a scheduling word and three 8-byte instructions;
/// `EXIT` 0xe30 and `BPT` 0xe3a in bits 52..64 (`EXIT`'s guard `PT` 7 in bits 16..20), `NOP`
/// 0x50b, `MOV` from a constant 0x4c98 in bits 48..64 with its destination in bits 0..8.
fn maxwell(code: &[u8]) -> Body {
    let mut read = 0;
    for at in (0..).step_by(8) {
        if at % 32 == 0 {
            continue; // the scheduling word
        }
        read += 1;
        let Some(w) = word(code, at).filter(|_| read <= MAX_INSTRUCTIONS) else {
            return Body::Code;
        };
        match (w >> 52, (w >> 16) & 0xf) {
            (0xe30, 0x7) => return Body::Empty(Stub::Returns),
            (0xe3a, _) => return Body::Empty(Stub::Traps),
            (0x50b, _) => {}
            _ if w >> 48 == 0x4c98 && w & 0xff == 1 => {}
            _ => return Body::Code,
        }
    }
    Body::Code
}

/// How far into an entry's body PTX is read: a stub's body is a few words, or a `printf`'s
/// call sequence (about 1.5 KB for five arguments).
const PTX_BODY: usize = 4096;

/// The body of the PTX entry whose `{` is at the start of `body` (the text from there on).
pub fn ptx(body: &[u8]) -> Body {
    let Some(text) = body.strip_prefix(b"{") else {
        return Body::Code;
    };
    let text = text.get(..PTX_BODY).unwrap_or(text);
    let mut rest = text;
    let mut statement: Vec<u8> = Vec::new();
    // Inside a call sequence (`{ // callseq`): its `.param`s and `ld.param` are the call's.
    let mut depth = 0usize;
    let mut asserted = false;
    // Labels branched to and not yet passed, and labels passed: a branch may only skip
    // forward, past no work, to a label before the end.
    let (mut ahead, mut passed): (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
    while let Some((&b, tail)) = rest.split_first() {
        if rest.starts_with(b"//") {
            rest = rest
                .iter()
                .position(|&c| c == b'\n')
                .and_then(|n| rest.get(n..))
                .unwrap_or_default();
            continue;
        }
        if rest.starts_with(b"/*") {
            rest = memchr::memmem::find(rest, b"*/")
                .and_then(|n| rest.get(n + 2..))
                .unwrap_or_default();
            continue;
        }
        rest = tail;
        match b {
            b'{' => depth += 1,
            // The end, with nothing done: it returns (a trap after an assert's call).
            b'}' if depth == 0 => return ended(asserted, Stub::Returns, &ahead),
            b'}' => depth -= 1,
            b';' => {
                let (label, said) = ptx_statement(&statement, depth > 0);
                if let Some(label) = label {
                    ahead.retain(|l| l.as_slice() != label);
                    passed.push(label.to_vec());
                }
                match said {
                    Statement::NoWork => {}
                    Statement::Calls { asserts } => asserted |= asserts,
                    Statement::Ends(stub) => return ended(asserted, stub, &ahead),
                    Statement::Branch(to) if !passed.iter().any(|l| l.as_slice() == to) => {
                        ahead.push(to.to_vec());
                    }
                    Statement::Branch(_) | Statement::Work => return Body::Code,
                }
                statement.clear();
            }
            _ => statement.push(b),
        }
    }
    Body::Code // past what is read: a body
}

/// A stub that ends as `stub` says, or traps if it called `__assertfail` (which does not
/// return); a body where a branch skips past the end read.
fn ended(asserted: bool, stub: Stub, ahead: &[Vec<u8>]) -> Body {
    match (ahead.is_empty(), asserted) {
        (false, _) => Body::Code,
        (true, true) => Body::Empty(Stub::Traps),
        (true, false) => Body::Empty(stub),
    }
}

/// What one PTX statement is to a stub.
enum Statement<'a> {
    NoWork,
    Calls {
        asserts: bool,
    },
    Ends(Stub),
    /// `bra` to this label, under a predicate or not.
    Branch(&'a [u8]),
    Work,
}

/// One statement, and the label it starts with; `in_call` inside a call sequence's block.
fn ptx_statement(statement: &[u8], in_call: bool) -> (Option<&[u8]>, Statement<'_>) {
    let mut s = statement.trim_ascii();
    let mut label = None;
    // A label first: `$L__BB0_1:`.
    if let Some(colon) = s.iter().position(|&b| b == b':') {
        if let Some(l) = s.get(..colon).filter(|l| is_label(l)) {
            label = Some(l);
            s = s.get(colon + 1..).unwrap_or_default().trim_ascii();
        }
    }
    if s.is_empty() || s.starts_with(b".") {
        return (label, Statement::NoWork);
    }
    let mut words = s
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty());
    let mut word = words.next().unwrap_or_default();
    // A predicate guard: `@%p1 bra $L__BB0_2`; only a branch may be guarded.
    let guarded = word.starts_with(b"@");
    if guarded {
        word = words.next().unwrap_or_default();
    }
    let opcode = word.split(|&b| b == b'.').next().unwrap_or_default();
    let said = match (opcode, word) {
        (b"bra", _) => match words.next() {
            Some(to) if is_label(to) && words.next().is_none() => Statement::Branch(to),
            _ => Statement::Work,
        },
        _ if guarded => Statement::Work,
        (_, b"ret" | b"ret.uni" | b"exit") => Statement::Ends(Stub::Returns),
        (_, b"trap" | b"brkpt") => Statement::Ends(Stub::Traps),
        // `setp`: a predicate, for a branch past the rest.
        (b"mov" | b"cvta" | b"add" | b"setp", _) => Statement::NoWork,
        _ if word.starts_with(b"st.local.") || word.starts_with(b"st.param.") => Statement::NoWork,
        _ if in_call && word.starts_with(b"ld.param.") => Statement::NoWork,
        (b"call", _) => call_of(s),
        _ => Statement::Work,
    };
    (label, said)
}

/// Whether `l` is a PTX label (`$L__BB0_2`).
fn is_label(l: &[u8]) -> bool {
    !l.is_empty()
        && l.iter()
            .all(|&b| b.is_ascii_alphanumeric() || b"_$.%".contains(&b))
}

/// A `call` statement: no work when it calls `vprintf` or `__assertfail` and names nothing else
/// but its return value and parameters.
fn call_of(statement: &[u8]) -> Statement<'_> {
    let mut asserts = false;
    let mut callee = false;
    let words = statement
        .split(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        .filter(|w| !w.is_empty());
    for w in words {
        let numbered = |prefix: &[u8]| {
            w.strip_prefix(prefix)
                .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
        };
        match w {
            b"call" | b"uni" => {}
            b"vprintf" => callee = true,
            b"__assertfail" => (callee, asserts) = (true, true),
            _ if numbered(b"retval") || numbered(b"param") => {}
            _ => return Statement::Work,
        }
    }
    match callee {
        true => Statement::Calls { asserts },
        false => Statement::Work,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volta_code(words: &[u64]) -> Vec<u8> {
        words
            .iter()
            .flat_map(|w| {
                let mut v = w.to_le_bytes().to_vec();
                v.extend_from_slice(&[0u8; 8]);
                v
            })
            .collect()
    }

    /// The encodings nvcc 13.2 and 11.8 wrote (`cuobjdump -sass`, docs/ARCH_RULES.md section
    /// 10); the toolchain tests compare every kernel of real builds with cuobjdump.
    #[test]
    fn cubin_stubs_as_nvcc_writes_them() {
        let cc = |s: &str| s.parse::<Cc>().unwrap();
        let cubin = |code: &[u8], cc: Cc| cubin(code, cc, Calls::default());
        // sm_75: MOV R1, c[0x0][0x28]; EXIT; BRA
        let exit75 = volta_code(&[0x00000a0000017a02, 0x000000000000794d, 0xfffffff000007947]);
        assert_eq!(cubin(&exit75, cc("7.5")), Some(Body::Empty(Stub::Returns)));
        // sm_90: LDC R1, c[0x0][0x28]; BPT.TRAP 0x1
        let trap90 = volta_code(&[0x00000a00ff017b82, 0x000000040000795c]);
        assert_eq!(cubin(&trap90, cc("9.0")), Some(Body::Empty(Stub::Traps)));
        // sm_70: MOV R1; @!PT SHFL.IDX; EXIT
        let exit70 = volta_code(&[0x00000a0000017a02, 0x000000fffffff389, 0x000000000000794d]);
        assert_eq!(cubin(&exit70, cc("7.0")), Some(Body::Empty(Stub::Returns)));
        // sm_100: LDC R1; S2R R5, SR_TID.X; ...; @P0 EXIT: a body.
        let body = volta_code(&[0x0000df00ff017b82, 0x0000000000057919, 0x000000000000094d]);
        assert_eq!(cubin(&body, cc("10.0")), Some(Body::Code));
        // A MOV into another register is no work; a store to global memory is.
        let mov = volta_code(&[0x00000a0000027a02, 0x000000000000794d]);
        assert_eq!(cubin(&mov, cc("8.0")), Some(Body::Empty(Stub::Returns)));
        let stg = volta_code(&[0x0000000502007986, 0x000000000000794d]);
        assert_eq!(cubin(&stg, cc("8.0")), Some(Body::Code));
        // Cut short, or nothing: a body (nothing is claimed).
        assert_eq!(cubin(&exit75[..16], cc("7.5")), Some(Body::Code));
        assert_eq!(cubin(&[], cc("7.5")), Some(Body::Code));
        // sm_50: [sched] MOV R1, c[0x0][0x20]; NOP; NOP; [sched] NOP; EXIT
        let mut m = Vec::new();
        for w in [
            0u64,
            0x4c98078000870001,
            0x50b0000000070f00,
            0x50b0000000070f00,
            0,
            0x50b0000000070f00,
            0xe30000000007000f,
        ] {
            m.extend_from_slice(&w.to_le_bytes());
        }
        assert_eq!(cubin(&m, cc("5.0")), Some(Body::Empty(Stub::Returns)));
        m[16..24].copy_from_slice(&0xe3a00000001000c0u64.to_le_bytes());
        assert_eq!(cubin(&m, cc("6.1")), Some(Body::Empty(Stub::Traps)));
        // Kepler is not read.
        assert_eq!(cubin(&m, cc("3.5")), None);
    }

    /// nvcc 13.2, sm_90, `if (threadIdx.x == 0) printf(...)` compiled out: the threads other
    /// than 0 leave at `@P0 EXIT`, thread 0 prints and returns. Launched on an H200 it printed
    /// and wrote nothing (docs/ARCH_RULES.md section 10); a call of `__assertfail` instead traps
    /// (710).
    #[test]
    fn one_thread_prints_and_every_thread_returns() {
        let code = volta_code(&[
            0x00000a00ff017b82, // LDC R1, c[0x0][0x28]
            0x0000000000007919, // S2R R0, SR_TID.X
            0x000000ff0000720c, // ISETP.NE.AND P0, PT, R0, RZ, PT
            0x000000000000094d, // @P0 EXIT
            0x0000003000007802, // MOV R0, 0x30
            0x0100040000047ab9, // ULDC.64 UR4, c[0x4][0x10]
            0x0000000000067805, // CS2R R6, SRZ
            0x00000004ff047e24, // IMAD.U32 R4, RZ, RZ, UR4
            0x0100000000027b82, // LDC.64 R2, c[0x4][R0]
            0x00000005ff057e24, // IMAD.U32 R5, RZ, RZ, UR5
            0x000000001014794e, // LEPC R20
            0x0000000002007343, // CALL.ABS.NOINC R2
            0x000000000000794d, // EXIT
        ]);
        let cc = "9.0".parse::<Cc>().unwrap();
        let prints = Calls {
            only_print_or_assert: true,
            call_traps: false,
        };
        assert_eq!(cubin(&code, cc, prints), Some(Body::Empty(Stub::Returns)));
        let asserts = Calls {
            call_traps: true,
            ..prints
        };
        assert_eq!(cubin(&code, cc, asserts), Some(Body::Empty(Stub::Traps)));
        // A call of anything else is work; so is a conditional instruction other than EXIT.
        assert_eq!(cubin(&code, cc, Calls::default()), Some(Body::Code));
        let mut guarded = code.clone();
        guarded[4 * 16..4 * 16 + 8].copy_from_slice(&0x0000003000000802u64.to_le_bytes());
        assert_eq!(cubin(&guarded, cc, prints), Some(Body::Code)); // @P0 MOV
    }

    #[test]
    fn ptx_stubs_as_nvcc_writes_them() {
        assert_eq!(ptx(b"{\n\n\n\n\tret;\n\n}\n"), Body::Empty(Stub::Returns));
        assert_eq!(
            ptx(b"{\n\t// begin inline asm\n\ttrap;\n\t// end inline asm\n\tret;\n\n}"),
            Body::Empty(Stub::Traps)
        );
        assert_eq!(
            ptx(b"{\n\t.reg .b32 %r<2>;\n/* c */ $L__BB0_1:\n\tret;\n}"),
            Body::Empty(Stub::Returns)
        );
        assert_eq!(
            ptx(b"{\n\t.reg .pred %p<2>;\n\tld.param.u64 %rd1, [a_param_0];\n\tret;\n}"),
            Body::Code
        );
        assert_eq!(ptx(b"{\n\t@%p1 bra $L__BB0_2;\n\tret;\n}"), Body::Code);
        // One thread prints: a forward branch past the call to a label before `ret;`. A
        // branch back, or to a label after the end, is a body.
        let one = "{\n\tmov.u32 %r1, %tid.x;\n\tsetp.ne.s32 %p1, %r1, 0;\n\t@%p1 bra $L__BB0_2;\n\t{ // callseq 0, 0\n\t.param .b64 param0;\n\tst.param.b64 [param0+0], %rd1;\n\tcall.uni (retval0), vprintf, (param0, param1);\n\t} // callseq 0\n$L__BB0_2:\n\tret;\n}";
        assert_eq!(ptx(one.as_bytes()), Body::Empty(Stub::Returns));
        let back = "{\n$L__BB0_1:\n\tsetp.ne.s32 %p1, %r1, 0;\n\t@%p1 bra $L__BB0_1;\n\tret;\n}";
        assert_eq!(ptx(back.as_bytes()), Body::Code);
        let past = "{\n\t@%p1 bra $L__BB0_2;\n\tret;\n$L__BB0_2:\n\tst.global.u32 [%rd1], 1;\n}";
        assert_eq!(ptx(past.as_bytes()), Body::Code);
        assert_eq!(ptx(b"{ @%p1 st.local.u32 [%rd1], 1; ret; }"), Body::Code);
        // An empty body returns; brkpt traps; a block around nothing is nothing.
        assert_eq!(ptx(b"{\n}"), Body::Empty(Stub::Returns));
        assert_eq!(ptx(b"{ brkpt; }"), Body::Empty(Stub::Traps));
        assert_eq!(ptx(b"{ { ret; } }"), Body::Empty(Stub::Returns));
        let long = [b"{".as_slice(), &[b' '; 5000], b"ret;}"].concat();
        assert_eq!(ptx(&long), Body::Code);
        // Work: a store to global memory, an atomic, a call of anything but printf or assert.
        for work in [
            "st.global.u32 [%rd1], 1;",
            "atom.global.add.u32 %r1, [%rd1], 1;",
            "call.uni malloc, (param0);",
            "@%p1 bra $L__BB0_2;",
        ] {
            assert_eq!(
                ptx(format!("{{ {work} ret; }}").as_bytes()),
                Body::Code,
                "{work}"
            );
        }
    }

    /// What nvcc 13.2 writes for compute_80 of a printf then a trap (llama.cpp's
    /// `NO_DEVICE_CODE`) and of `assert(false)`.
    #[test]
    fn ptx_printf_and_assert_stubs() {
        let printf = "{\n\t.local .align 8 .b8 \t__local_depot0[40];\n\t.reg .b64 \t%SP;\n\tmov.u64 \t%SPL, __local_depot0;\n\tcvta.local.u64 \t%SP, %SPL;\n\tadd.u64 \t%rd1, %SP, 0;\n\tmov.u32 \t%r1, 15;\n\tst.local.u32 \t[%rd2+8], %r1;\n\tmov.u64 \t%rd9, $str;\n\tcvta.global.u64 \t%rd10, %rd9;\n\t{ // callseq 0, 0\n\t.reg .b32 temp_param_reg;\n\t.param .b64 param0;\n\tst.param.b64 \t[param0+0], %rd10;\n\t.param .b32 retval0;\n\tcall.uni (retval0), \n\tvprintf, \n\t(\n\tparam0, \n\tparam1\n\t);\n\tld.param.b32 \t%r3, [retval0+0];\n\t} // callseq 0\n\t// begin inline asm\n\ttrap;\n\t// end inline asm\n\tret;\n\n}";
        assert_eq!(ptx(printf.as_bytes()), Body::Empty(Stub::Traps));
        let returns = printf.replace("\ttrap;", "");
        assert_eq!(ptx(returns.as_bytes()), Body::Empty(Stub::Returns));
        let assert = "{\n\tmov.u64 \t%rd1, $str$4;\n\t{ // callseq 3, 0\n\t.param .b64 param0;\n\tst.param.b64 \t[param0+0], %rd2;\n\tcall.uni \n\t__assertfail, \n\t(\n\tparam0\n\t);\n\t} // callseq 3\n\tret;\n\n}";
        assert_eq!(ptx(assert.as_bytes()), Body::Empty(Stub::Traps));
        // ld.param outside a call reads the kernel's parameters: a body begins.
        let reads = printf.replace("\tmov.u32 \t%r1, 15;", "\tld.param.u32 \t%r1, [k_param_1];");
        assert_eq!(ptx(reads.as_bytes()), Body::Code);
    }
}
