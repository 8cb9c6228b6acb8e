//! Whether a kernel's code does anything: a kernel whose body was compiled out for a target
//! (`#if __CUDA_ARCH__ >= 800` around it, `NO_DEVICE_CODE`, a `__trap()` in the `#else`) is,
//! in that image, a stub: it returns at once, or traps, and nothing else
//! (docs/ARCH_RULES.md section 10).
//!
//! Read from the code itself, never guessed:
//! - a cubin of the Volta-and-later instruction set (CC 7.0 to 12.x: 16-byte instructions, the
//!   opcode in bits 0..12 and the guard predicate in bits 12..16 of the first word) or of
//!   Maxwell and Pascal (CC 5.x, 6.x: 8-byte instructions, every fourth word a scheduling
//!   word): the instructions from the kernel's start, a stack-pointer set-up (`MOV`/`LDC` into
//!   `R1`), `NOP`s and never-executed (`@!PT`) instructions aside, must reach an unconditional
//!   `EXIT` or `BPT.TRAP` before anything else. Kepler and unknown majors are not read.
//! - PTX: an entry whose body, directives and comments aside, is `ret;`, `exit;` or `trap;`
//!   before any other instruction.
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

/// How many instructions of a kernel are read before it counts as having a body.
const MAX_INSTRUCTIONS: usize = 16;

/// Whether `cc`'s instruction set is one [`cubin`] reads.
pub(crate) fn reads_cubins_of(cc: Cc) -> bool {
    matches!(cc.major, 5..=12)
}

/// The body of a kernel whose code starts at `code` (its bytes, from the symbol's value), for
/// a cubin of `cc`. `None` where the instruction set is not one fatkit reads.
pub fn cubin(code: &[u8], cc: Cc) -> Option<Body> {
    match cc.major {
        7..=12 => Some(volta(code)),
        5 | 6 => Some(maxwell(code)),
        _ => None,
    }
}

fn word(bytes: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = bytes.get(at..at + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// Volta to Blackwell: 16 bytes per instruction; `EXIT` 0x94d, `BPT` 0x95c, `NOP` 0x918, `MOV`
/// from a constant 0xa02, `LDC` 0xb82; guard `PT` 7, `!PT` 15 (never executed).
fn volta(code: &[u8]) -> Body {
    for i in 0..MAX_INSTRUCTIONS {
        let Some(lo) = word(code, i * 16) else {
            return Body::Code;
        };
        let (opcode, guard) = (lo & 0xfff, (lo >> 12) & 0xf);
        if guard == 0xf {
            continue; // @!PT: never executed
        }
        if guard != 0x7 {
            return Body::Code; // conditional: something decides
        }
        let dest = (lo >> 16) & 0xff;
        match opcode {
            0x94d => return Body::Empty(Stub::Returns),
            0x95c => return Body::Empty(Stub::Traps),
            0x918 => {}
            0xa02 | 0xb82 if dest == 1 => {} // the stack pointer, R1, from a constant
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

/// How far into an entry's body PTX is read: a stub's body is a few words.
const PTX_BODY: usize = 512;

/// The body of the PTX entry whose `{` is at the start of `body` (the text from there on).
pub fn ptx(body: &[u8]) -> Body {
    let Some(text) = body.strip_prefix(b"{") else {
        return Body::Code;
    };
    let text = text.get(..PTX_BODY).unwrap_or(text);
    let mut rest = text;
    let mut statement: Vec<u8> = Vec::new();
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
            b'{' => return Body::Code, // a nested block: more than a stub has
            b'}' => return Body::Code, // the end, with no return reached
            b';' => {
                if let Some(body) = ptx_statement(&statement) {
                    return body;
                }
                statement.clear();
            }
            _ => statement.push(b),
        }
    }
    Body::Code // past what is read: a body
}

/// One statement: `None` for a directive or nothing (read on), else what it makes the body.
fn ptx_statement(statement: &[u8]) -> Option<Body> {
    let mut s = statement.trim_ascii();
    // A label first: `$L__BB0_1:`.
    if let Some(colon) = s.iter().position(|&b| b == b':') {
        if s.get(..colon).is_some_and(|l| {
            l.iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"_$.%".contains(&b))
        }) {
            s = s.get(colon + 1..).unwrap_or_default().trim_ascii();
        }
    }
    if s.is_empty() || s.starts_with(b".") {
        return None;
    }
    let word = s
        .split(|b| b.is_ascii_whitespace())
        .next()
        .unwrap_or_default();
    Some(match word {
        b"ret" | b"ret.uni" | b"exit" => Body::Empty(Stub::Returns),
        b"trap" => Body::Empty(Stub::Traps),
        _ => Body::Code,
    })
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
        // A MOV into another register is work.
        let mov = volta_code(&[0x00000a0000027a02, 0x000000000000794d]);
        assert_eq!(cubin(&mov, cc("8.0")), Some(Body::Code));
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
        assert_eq!(ptx(b"{\n}"), Body::Code);
        assert_eq!(ptx(b"{ { ret; } }"), Body::Code);
        let long = [b"{".as_slice(), &[b' '; 600], b"ret;}"].concat();
        assert_eq!(ptx(&long), Body::Code);
    }
}
