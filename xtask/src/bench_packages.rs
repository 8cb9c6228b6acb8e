//! `cargo xtask bench environments`: the package's answer (docs/ARCH_RULES.md section 11) on
//! the packages people install, fetched from PyPI at run time into the cache (never into the
//! repository), each answer checked against what its users meet: torch 2.15 and its
//! environment run on the GPUs it supports, a driver too old is NO naming its floor in the
//! first lines, torch 2.7.1 cu126 stays NO on an RTX 5090, Hopper-only and Blackwell-only
//! libraries are set aside where their packages use other code, a package compiled at run
//! time is said so, every answer fits 50 lines, and no fix asks a user to rebuild a
//! third party's package or install a build that cannot exist.

use std::path::{Path, PathBuf};

use fatkit_cli::{Error, Outcome, Result};
use fatkit_toolchain as toolchain;

use crate::bench_env::{audit, check, fetch, install, print_checks, Check};
use crate::harness::{at, fatkit_binary, text_at};

/// The wheels fetched without their requirements, each judged alone.
const WHEELS: &[&str] = &[
    "vllm==0.33.0",
    "sgl-kernel==0.3.21",
    "flashinfer-python==0.7.2.post1",
    "xformers==0.0.34",
    "onnxruntime-gpu==1.31.1",
    "torchao==0.18.0",
    "nvidia-cudnn-cu12==9.28.0.42",
    "nvidia-cudnn-cu13==9.28.1.4",
];

/// What an answer must be: its exit code, words its first three lines hold, words its fix
/// lines must not hold.
struct Want {
    exit: i32,
    first: &'static [&'static str],
    not_in_fixes: &'static [&'static str],
}

const fn want(
    exit: i32,
    first: &'static [&'static str],
    not_in_fixes: &'static [&'static str],
) -> Want {
    Want {
        exit,
        first,
        not_in_fixes,
    }
}

/// A file of `dir` whose name starts with `prefix`.
fn wheel(dir: &Path, prefix: &str) -> Result<PathBuf> {
    std::fs::read_dir(dir)?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .ok_or_else(|| {
            crate::harness::failed(format!(
                "bench environments: no {prefix}* in {}",
                dir.display()
            ))
        })
}

/// The fix lines of an answer (`  fix: ...` and the lines that continue it).
pub(crate) fn fix_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let t = line.trim_start();
        inside = t.starts_with("fix:") || (inside && line.starts_with("      "));
        if inside {
            out.push(t);
        }
    }
    out
}

/// One case: audits `input` with `args`, prints the answer, checks it against `want`.
fn case(
    fatkit: &Path,
    (name, input, args): (&str, &Path, &[&str]),
    want: &Want,
    checks: &mut Vec<Check>,
) -> Result<()> {
    let mut all: Vec<String> = vec![input.display().to_string()];
    all.extend(args.iter().map(|a| (*a).to_owned()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let (code, text) = audit(fatkit, &all)?;
    let lines = text.lines().count();
    let first = text.lines().next().unwrap_or_default();
    let verdict = first.split(": ").nth(1).unwrap_or_default();
    println!("== {name} ({lines} lines, exit {code})\n{text}");
    let head: String = text.lines().take(3).collect::<Vec<_>>().join("\n");
    check(
        checks,
        &format!("{name}: exit {}", want.exit),
        code == want.exit,
        format!("exit {code}: {verdict}"),
    );
    for w in want.first {
        check(
            checks,
            &format!("{name}: the first lines say {w:?}"),
            head.contains(w),
            "",
        );
    }
    check(
        checks,
        &format!("{name}: at most 50 lines"),
        lines <= 50,
        format!("{lines} lines"),
    );
    let fixes = fix_lines(&text);
    for bad in
        want.not_in_fixes
            .iter()
            .chain(&["compile_library", "FATKIT_NVCC", "TORCH_CUDA_ARCH_LIST"])
    {
        let hit = fixes.iter().find(|f| f.contains(bad));
        check(
            checks,
            &format!("{name}: no fix says {bad:?}"),
            hit.is_none(),
            hit.copied().unwrap_or_default(),
        );
    }
    Ok(())
}

/// What a case audits.
#[derive(Clone, Copy)]
enum Input {
    /// A wheel of [`WHEELS`], by the start of its file name.
    Wheel(&'static str),
    Torch215,
    Env215,
    Env26,
    Torch271,
    EnvJax,
}

// A third party's package that does not support a GPU gets no "install a build made for" it:
// no such build exists.
const NO_BUILD: &[&str] = &["made for sm_"];

/// Every case: its name, what it audits with which arguments, and what the answer must be.
const CASES: &[(&str, Input, &[&str], Want)] = &[
    (
        "torch 2.15.0 wheel on an RTX 5090",
        Input::Torch215,
        &["--gpu", "RTX 5090"],
        want(0, &[": yes on GeForce RTX 5090"], &[]),
    ),
    (
        "torch 2.15.0 wheel on an H100",
        Input::Torch215,
        &["--gpu", "H100"],
        want(0, &[": yes on H100"], &[]),
    ),
    (
        "torch 2.15.0 wheel on a T4",
        Input::Torch215,
        &["--gpu", "T4"],
        want(1, &[" on T4"], &[]),
    ),
    (
        "pip install torch 2.15.0 on an RTX 5090",
        Input::Env215,
        &["--gpu", "RTX 5090"],
        want(0, &[": yes, by PTX JIT on GeForce RTX 5090"], &[]),
    ),
    (
        "pip install torch 2.15.0 on an RTX 5090, driver 570.124.06",
        Input::Env215,
        &["--gpu", "RTX 5090", "--driver", "570.124.06"],
        want(
            1,
            &[": NO on", "580.65.06", "download.pytorch.org/whl/cu128"],
            NO_BUILD,
        ),
    ),
    (
        "vllm 0.33.0 on an RTX 5090",
        Input::Wheel("vllm-0.33.0"),
        &["--gpu", "RTX 5090"],
        want(0, &[": yes"], NO_BUILD),
    ),
    (
        "vllm 0.33.0 on a T4",
        Input::Wheel("vllm-0.33.0"),
        &["--gpu", "T4"],
        want(0, &[": yes on T4"], NO_BUILD),
    ),
    (
        "sgl-kernel 0.3.21 on an RTX 5090",
        Input::Wheel("sgl_kernel-0.3.21"),
        &["--gpu", "RTX 5090"],
        want(0, &[": yes"], NO_BUILD),
    ),
    (
        "sgl-kernel 0.3.21 on a T4",
        Input::Wheel("sgl_kernel-0.3.21"),
        &["--gpu", "T4"],
        want(1, &[": NO on T4", "built for CC 8.0 and later"], NO_BUILD),
    ),
    (
        "flashinfer-python 0.7.2.post1 on an H100",
        Input::Wheel("flashinfer_python-0.7.2"),
        &["--gpu", "H100"],
        want(0, &["compiles its kernels at run time"], &[]),
    ),
    (
        "xformers 0.0.34 on an RTX 5090",
        Input::Wheel("xformers-0.0.34"),
        &["--gpu", "RTX 5090"],
        want(
            1,
            &[": PARTLY on GeForce RTX 5090", "compiled out"],
            NO_BUILD,
        ),
    ),
    (
        "onnxruntime-gpu 1.31.1 on an RTX 3090",
        Input::Wheel("onnxruntime_gpu-1.31.1"),
        &["--gpu", "RTX 3090"],
        want(0, &[": yes on GeForce RTX 3090"], &[]),
    ),
    (
        "onnxruntime-gpu 1.31.1 on an H100",
        Input::Wheel("onnxruntime_gpu-1.31.1"),
        &["--gpu", "H100"],
        want(0, &[": yes on H100"], &[]),
    ),
    (
        "onnxruntime-gpu 1.31.1 on an RTX 5090",
        Input::Wheel("onnxruntime_gpu-1.31.1"),
        &["--gpu", "RTX 5090"],
        want(0, &[": yes on GeForce RTX 5090"], &[]),
    ),
    (
        "torchao 0.18.0 on a T4",
        Input::Wheel("torchao-0.18.0"),
        &["--gpu", "T4"],
        want(0, &["nothing of it is built for this GPU, by design"], &[]),
    ),
    (
        "cuDNN cu12 9.28 on a GTX 1080",
        Input::Wheel("nvidia_cudnn_cu12-9.28"),
        &["--gpu", "GTX 1080"],
        want(1, &[": NO on GeForce GTX 1080"], NO_BUILD),
    ),
    (
        "cuDNN cu13 9.28.1 on an H100, driver 570.124.06",
        Input::Wheel("nvidia_cudnn_cu13-9.28.1"),
        &["--gpu", "H100", "--driver", "570.124.06"],
        want(
            1,
            &[": NO on H100", "580.65.06", "nvidia_cudnn_cu12"],
            NO_BUILD,
        ),
    ),
    (
        "cuDNN cu13 9.28.1 (x86-64) on a GB10",
        Input::Wheel("nvidia_cudnn_cu13-9.28.1"),
        &["--gpu", "GB10"],
        want(1, &[": NO on GB10", "aarch64"], NO_BUILD),
    ),
    (
        "PyTorch 2.6.0 environment on an RTX 5070 Ti, driver 570.124.06",
        Input::Env26,
        &["--gpu", "RTX 5070 Ti", "--driver", "570.124.06"],
        want(
            1,
            &[
                ": NO on GeForce RTX 5070 Ti",
                "download.pytorch.org/whl/cu128",
            ],
            &[],
        ),
    ),
    (
        "torch 2.7.1 (cu126) on an RTX 5090",
        Input::Torch271,
        &["--gpu", "RTX 5090"],
        want(1, &[": NO on GeForce RTX 5090"], &[]),
    ),
    (
        "JAX 0.10.2 (cuda12) environment on an RTX 5070",
        Input::EnvJax,
        &["--gpu", "RTX 5070"],
        want(0, &[": yes"], &[]),
    ),
];

/// Where each [`Input`] is, fetched from PyPI (and installed) once.
struct Inputs {
    packages: PathBuf,
    torch215: PathBuf,
    env215: PathBuf,
    env26: PathBuf,
    torch271: PathBuf,
    envjax: PathBuf,
}

impl Inputs {
    fn fetch() -> Result<Inputs> {
        let corpus = toolchain::cache_dir().map_err(Error::from)?.join("corpus");
        let packages = corpus.join("packages");
        for spec in WHEELS {
            let (name, version) = spec.split_once("==").unwrap_or((spec, ""));
            fetch(
                spec,
                false,
                &packages,
                &format!("{}-{version}", name.replace('-', "_")),
            )?;
        }
        let t215 = corpus.join("env-torch-2.15.0");
        fetch("torch==2.15.0", true, &t215, "torch-2.15.0")?;
        let t26 = corpus.join("env-torch-2.6.0");
        fetch("torch==2.6.0", true, &t26, "torch-2.6.0")?;
        let extra = corpus.join("env-extra");
        fetch("torch==2.7.1", false, &extra, "torch-2.7.1")?;
        let jax = corpus.join("env-jax-0.10.2");
        fetch("jax[cuda12]==0.10.2", true, &jax, "jax-0.10.2")?;
        Ok(Inputs {
            torch215: wheel(&t215, "torch-2.15.0")?,
            env215: install(&t215)?,
            env26: install(&t26)?,
            torch271: wheel(&extra, "torch-2.7.1")?,
            envjax: install(&jax)?,
            packages,
        })
    }

    fn path(&self, input: Input) -> Result<PathBuf> {
        Ok(match input {
            Input::Wheel(prefix) => wheel(&self.packages, prefix)?,
            Input::Torch215 => self.torch215.clone(),
            Input::Env215 => self.env215.clone(),
            Input::Env26 => self.env26.clone(),
            Input::Torch271 => self.torch271.clone(),
            Input::EnvJax => self.envjax.clone(),
        })
    }
}

pub fn run() -> Result<Outcome> {
    let inputs = Inputs::fetch()?;
    let fatkit = fatkit_binary()?;
    let mut checks = Vec::new();
    for (name, input, args, want) in CASES {
        case(
            &fatkit,
            (name, &inputs.path(*input)?, args),
            want,
            &mut checks,
        )?;
    }
    // The cuDNN cu12 fix names the last release built for Pascal, and that release is.
    let cudnn = inputs.path(Input::Wheel("nvidia_cudnn_cu12-9.28"))?;
    let (_, text) = audit(
        &fatkit,
        &[&cudnn.display().to_string(), "--gpu", "GTX 1080"],
    )?;
    check(
        &mut checks,
        "cuDNN cu12 9.28 on a GTX 1080: the fix names nvidia-cudnn-cu12<=9.10",
        text.contains("nvidia-cudnn-cu12<=9.10"),
        "",
    );
    fetch(
        "nvidia-cudnn-cu12==9.10.2.21",
        false,
        &inputs.packages,
        "nvidia_cudnn_cu12-9.10",
    )?;
    let last = inputs.path(Input::Wheel("nvidia_cudnn_cu12-9.10"))?;
    let (_, text) = audit(&fatkit, &[&last.display().to_string(), "--gpu", "GTX 1080"])?;
    let first = text.lines().next().unwrap_or_default().to_owned();
    check(
        &mut checks,
        "cuDNN cu12 9.10.2.21, the release it names, is not NO on a GTX 1080",
        !first.contains(": NO on"),
        first,
    );
    diff_checks(&fatkit, &inputs, &mut checks)?;
    let failed = print_checks(&checks);
    Ok(if failed == 0 {
        Outcome::Ok
    } else {
        Outcome::Finding
    })
}

/// `fatkit diff` on real pairs (issue 57): torch 2.7.1 (CUDA 12.6) and 2.15.0 (CUDA 13) as
/// wheels, and the environments of torch 2.6.0 and 2.15.0 as pip installs them (cu12 wheels
/// then cu13 ones): CUDA 13 dropped Volta, so each release loses the V100 and the RTX 5090 is
/// gained or kept; timed as a user runs it.
fn diff_checks(fatkit: &Path, inputs: &Inputs, checks: &mut Vec<Check>) -> Result<()> {
    let pairs = [
        (
            "torch 2.7.1 -> 2.15.0 wheels",
            &inputs.torch271,
            &inputs.torch215,
        ),
        (
            "torch 2.6.0 -> 2.15.0 environments",
            &inputs.env26,
            &inputs.env215,
        ),
    ];
    for (name, old, new) in pairs {
        let start = std::time::Instant::now();
        let out = std::process::Command::new(fatkit)
            .arg("diff")
            .args([old, new])
            .args([
                "--gpu", "V100", "--gpu", "RTX 5090", "--gpu", "H100", "--json",
            ])
            .output()?;
        let took = start.elapsed().as_secs_f64();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let text = |v: &serde_json::Value, k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let list = |v: &serde_json::Value, k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let changes: Vec<(String, String, String)> = list(&json, "libraries")
            .iter()
            .flat_map(|l| {
                let name = text(l, "name");
                list(l, "changes")
                    .iter()
                    .map(|c| (name.clone(), text(c, "kind"), text(c, "gpu")))
                    .collect::<Vec<_>>()
            })
            .collect();
        let has = |lib: &str, kind: &str, gpu: &str| {
            changes
                .iter()
                .any(|(l, k, g)| l.ends_with(lib) && k == kind && g == gpu)
        };
        println!(
            "== diff {name}: exit {}, {} changes, {took:.1} s",
            out.status.code().unwrap_or(-1),
            changes.len()
        );
        check(
            checks,
            &format!("diff {name}: exit 1, libtorch_cuda.so loses the V100"),
            out.status.code() == Some(1) && has("libtorch_cuda.so", "gpu-lost", "V100"),
            format!("{} changes", changes.len()),
        );
        check(
            checks,
            &format!("diff {name}: libtorch_cuda.so does not lose the RTX 5090"),
            !has("libtorch_cuda.so", "gpu-lost", "GeForce RTX 5090"),
            "",
        );
    }
    vllm_diff(fatkit, inputs, checks)
}

/// Two vLLM releases (0.32.0 and 0.33.0 wheels): the diff reads both (exit 0 or 1), and every
/// GPU it says the new release lost a library on is one where `audit` of the new release alone
/// does not pass.
fn vllm_diff(fatkit: &Path, inputs: &Inputs, checks: &mut Vec<Check>) -> Result<()> {
    fetch("vllm==0.32.0", false, &inputs.packages, "vllm-0.32.0")?;
    let old = inputs.path(Input::Wheel("vllm-0.32.0"))?;
    let new = inputs.path(Input::Wheel("vllm-0.33.0"))?;
    let gpus = ["V100", "T4", "A100", "RTX 4090", "H100", "B200", "RTX 5090"];
    let start = std::time::Instant::now();
    let mut cmd = std::process::Command::new(fatkit);
    cmd.arg("diff").args([&old, &new]).arg("--json");
    for g in gpus {
        cmd.args(["--gpu", g]);
    }
    let out = cmd.output()?;
    let took = start.elapsed().as_secs_f64();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let code = out.status.code().unwrap_or(-1);
    let lost: Vec<String> = at(&json, "/lost")
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| text_at(l, "/gpu").to_owned())
        .collect();
    let n = at(&json, "/libraries").as_array().map_or(0, Vec::len);
    println!("== diff vllm 0.32.0 -> 0.33.0 wheels: exit {code}, {n} libraries changed, lost on {lost:?}, {took:.1} s");
    check(
        checks,
        "diff vllm 0.32.0 -> 0.33.0: both read (exit 0 or 1)",
        code == 0 || code == 1,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    for gpu in &lost {
        let verdict = |wheel: &Path| -> Result<bool> {
            let (code, _) = audit(fatkit, &[&wheel.display().to_string(), "--gpu", gpu])?;
            Ok(code == 0)
        };
        let (was, is) = (verdict(&old)?, verdict(&new)?);
        check(
            checks,
            &format!("diff vllm: lost on {gpu}, and audit of 0.33.0 alone does not pass there"),
            !is,
            format!("0.32.0 passes: {was}, 0.33.0 passes: {is}"),
        );
    }
    Ok(())
}
