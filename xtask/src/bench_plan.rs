//! The target planner on a public crate (issue 45's acceptance), part of `cargo xtask bench
//! crates`: from the modules built for the profile, `fatkit plan` chooses the targets for
//! crates.io's limit and for half of it, and for crates.io's limit with a CUDA 12.2 driver as
//! the users' oldest (`--write` writes each as a profile); the crate is built again with each
//! profile (the compile cache serves every image), packaged by `cargo
//! package`, and audited for every GPU of the `generations` set. The size the plan predicted
//! must be within 5% of cargo's `.crate`, and what it said of each GPU must be what `audit`
//! says of the modules built with it.

use std::path::Path;
use std::process::Command;

use fatkit_cli::Result;

/// One planned build.
pub(crate) struct PlanRow {
    pub(crate) budget: u64,
    /// The users' oldest driver, where the plan was given one.
    pub(crate) driver: Option<&'static str>,
    pub(crate) targets: String,
    pub(crate) compress: String,
    /// The plan's size as written, and cargo's `.crate` built with it.
    pub(crate) predicted: Option<u64>,
    pub(crate) measured: Option<u64>,
    /// Each product compute capability and the plan's answer for it (`cubin`, `PTX JIT`,
    /// `no`), as `fatkit plan` printed it.
    pub(crate) planned: Vec<(String, String)>,
    /// Each GPU of the set: its name, what the plan said, what `audit` says.
    pub(crate) gpus: Vec<(String, String, String)>,
    pub(crate) problems: Vec<String>,
}

/// The goals: crates.io's limit, half of it, and crates.io's limit for users whose oldest
/// driver is at the CUDA 12.2 level (no ZSTD; cubins from CUDA 13 load only for GPUs newer
/// than that driver).
pub(crate) const GOALS: [(u64, Option<&str>); 3] = [
    (10 << 20, None),
    (5 << 20, None),
    (10 << 20, Some("535.104.05")),
];

/// Where one crate's workspace is, and how its build is run.
pub(crate) struct Planned<'a> {
    pub(crate) exe: &'a Path,
    pub(crate) ws: &'a Path,
    pub(crate) cache: &'a Path,
    /// The profile the workspace's package names now.
    pub(crate) profile: &'a str,
}

impl Planned<'_> {
    /// Plans every budget from the modules built for the profile (before any is rebuilt),
    /// then builds, packages and audits each.
    pub(crate) fn run(&self) -> Result<Vec<PlanRow>> {
        let prebuilt = self.ws.join("kern/kernels/prebuilt");
        let profiles = self.ws.join("kern/arch-profiles");
        std::fs::create_dir_all(&profiles)?;
        let mut rows = Vec::new();
        for (i, (budget, driver)) in GOALS.into_iter().enumerate() {
            let file = profiles.join(format!("plan-{i}.toml"));
            let budget_arg = budget.to_string();
            let mut args: Vec<&std::ffi::OsStr> = vec![
                "plan".as_ref(),
                prebuilt.as_os_str(),
                "--budget".as_ref(),
                budget_arg.as_ref(),
                "--for".as_ref(),
                "crate".as_ref(),
                "--write".as_ref(),
                file.as_os_str(),
            ];
            if let Some(d) = driver {
                args.extend([std::ffi::OsStr::new("--driver"), std::ffi::OsStr::new(d)]);
            }
            let (ok, text) = self.fatkit(&args)?;
            rows.push(read_plan(budget, driver, ok, &text));
        }
        let manifest = self.ws.join("kern/Cargo.toml");
        let original = std::fs::read_to_string(&manifest)?;
        for (i, row) in rows.iter_mut().enumerate() {
            if !row.problems.is_empty() {
                continue;
            }
            let name = format!("plan-{i}");
            let text = original.replace(
                &format!("profile = {:?}", self.profile),
                &format!("profile = {name:?}"),
            );
            std::fs::write(&manifest, text)?;
            self.build_package_audit(row, &prebuilt)?;
        }
        std::fs::write(&manifest, original)?;
        Ok(rows)
    }

    /// Builds with the row's profile, packages the crate, and audits what was built.
    fn build_package_audit(&self, row: &mut PlanRow, prebuilt: &Path) -> Result<()> {
        let manifest = self.ws.join("Cargo.toml");
        let (ok, text) = self.fatkit(&[
            "build-kernels".as_ref(),
            "--manifest-path".as_ref(),
            manifest.as_os_str(),
            "--cache-dir".as_ref(),
            self.cache.as_os_str(),
        ])?;
        if !ok {
            row.problems.push(format!(
                "build-kernels with the planned profile failed:\n{text}"
            ));
            return Ok(());
        }
        match package(self.ws) {
            Ok(size) => row.measured = Some(size),
            Err(e) => row.problems.push(e),
        }
        let args: Vec<&std::ffi::OsStr> = vec![
            "audit".as_ref(),
            "--json".as_ref(),
            "--matrix=generations".as_ref(),
            prebuilt.as_os_str(),
        ];
        let (_, json) = self.fatkit(&args)?;
        let mut audited = matrix_answers(&json);
        // With the users' oldest driver: every GPU that driver runs is judged with it; one
        // newer than it has a newer driver (as the plan judges it), and keeps the answer above.
        if let Some(d) = row.driver {
            let with = [std::ffi::OsStr::new("--driver"), std::ffi::OsStr::new(d)];
            let (_, json) = self.fatkit(&[args.as_slice(), &with].concat())?;
            let driver = d.parse::<fatkit_arch::driver::DriverVersion>().ok();
            for (old, new) in audited.iter_mut().zip(matrix_answers(&json)) {
                let device = old
                    .1
                    .parse()
                    .ok()
                    .map(|cc| fatkit_arch::Device::new(cc, driver));
                let known =
                    device.is_some_and(|d| fatkit_arch::rules::driver_predates(&d).is_none());
                if known {
                    *old = new;
                }
            }
        }
        if audited.is_empty() {
            row.problems.push(format!(
                "audit --matrix=generations gave no matrix:\n{json}"
            ));
        }
        for (gpu, cc, answer) in audited {
            let plan = row
                .planned
                .iter()
                .find(|(c, _)| *c == cc)
                .map_or_else(|| "-".to_owned(), |(_, how)| how.clone());
            if plan != answer {
                row.problems.push(format!(
                    "{gpu} (CC {cc}): the plan said {plan}, audit says {answer}"
                ));
            }
            row.gpus.push((gpu, plan, answer));
        }
        if let (Some(p), Some(m)) = (row.predicted, row.measured) {
            if p.abs_diff(m) * 20 > m {
                row.problems.push(format!(
                    "the plan predicted {p} bytes, cargo's .crate is {m} bytes: more than 5% apart"
                ));
            }
        }
        Ok(())
    }

    /// This xtask's fatkit command: whether it exited 0, and its stdout and stderr.
    fn fatkit(&self, args: &[&std::ffi::OsStr]) -> Result<(bool, String)> {
        let out = Command::new(self.exe).args(args).output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        Ok((out.status.success(), text))
    }
}

/// What `fatkit plan` printed: the targets, compression, size as written, and each product
/// compute capability's answer (`CC 12.0  from a cubin  GeForce RTX 5090, ...`).
fn read_plan(budget: u64, driver: Option<&'static str>, ok: bool, text: &str) -> PlanRow {
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.trim_start().strip_prefix(name))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let predicted = field("size:")
        .split(['(', ' '])
        .find_map(|n| n.parse().ok());
    let planned = text
        .lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix("CC ")?;
            let (cc, how) = rest.split_once(' ')?;
            let how = how.trim_start();
            let answer = ["from a cubin", "by PTX JIT", "nothing runs"]
                .into_iter()
                .find(|h| how.starts_with(h))?;
            Some((cc.to_owned(), plain(answer).to_owned()))
        })
        .collect();
    let mut row = PlanRow {
        budget,
        driver,
        targets: field("targets:"),
        compress: field("compress:"),
        predicted,
        measured: None,
        planned,
        gpus: Vec::new(),
        problems: Vec::new(),
    };
    if !ok || predicted.is_none() {
        row.problems.push(format!("fatkit plan failed:\n{text}"));
    }
    row
}

/// The plan's words for an answer, as the audit matrix words it.
fn plain(how: &str) -> &'static str {
    match how {
        "from a cubin" => "cubin",
        "by PTX JIT" => "PTX JIT",
        _ => "no",
    }
}

/// Each GPU of `audit --json --matrix`: `(name, cc, answer)`, the answer `cubin`, `PTX JIT`
/// or `no` where every library says it, else each library's answers with their counts.
fn matrix_answers(json: &str) -> Vec<(String, String, String)> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(json) else {
        return Vec::new();
    };
    let field = |v: &serde_json::Value, k: &str| v.get(k).cloned().unwrap_or_default();
    let matrix = field(&value, "matrix");
    let (Some(gpus), Some(cells)) = (
        matrix.get("gpus").and_then(|g| g.as_array()),
        matrix.get("cells").and_then(|c| c.as_array()),
    ) else {
        return Vec::new();
    };
    gpus.iter()
        .zip(cells)
        .map(|(gpu, row)| {
            let mut answers: Vec<(String, usize)> = Vec::new();
            for cell in row.as_array().into_iter().flatten() {
                let by = match cell.get("by").and_then(|b| b.as_str()) {
                    Some("ptx") => "PTX JIT".to_owned(),
                    Some(other) => other.to_owned(),
                    None => cell.to_string(),
                };
                match answers.iter_mut().find(|(a, _)| *a == by) {
                    Some((_, n)) => *n += 1,
                    None => answers.push((by, 1)),
                }
            }
            let answer = match answers.as_slice() {
                [(one, _)] => one.clone(),
                many => many
                    .iter()
                    .map(|(a, n)| format!("{a} {n}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            (
                field(gpu, "name").as_str().unwrap_or("?").to_owned(),
                field(gpu, "cc").as_str().unwrap_or("?").to_owned(),
                answer,
            )
        })
        .collect()
}

/// `cargo package` of the workspace's crate: its `.crate`'s size.
pub(crate) fn package(ws: &Path) -> std::result::Result<u64, String> {
    let file = ws.join("target/package/kern-0.1.0.crate");
    let _ = std::fs::remove_file(&file);
    let out = Command::new(crate::harness::cargo())
        .args([
            "package",
            "--no-verify",
            "--allow-dirty",
            "--offline",
            "-p",
            "kern",
        ])
        .current_dir(ws)
        .output()
        .map_err(|e| format!("cargo package could not run: {e}"))?;
    match std::fs::metadata(&file) {
        Ok(m) if out.status.success() => Ok(m.len()),
        _ => Err(format!(
            "cargo package of the vendored crate failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

/// The planned builds, after the crate's row: budget, choice, sizes, each GPU.
pub(crate) fn print(krate: &str, rows: &[PlanRow]) {
    let mib = |b: u64| format!("{:.2} MiB", b as f64 / f64::from(1u32 << 20));
    for r in rows {
        let sizes = match (r.predicted, r.measured) {
            (Some(p), Some(m)) => format!(
                "predicted {} ({p}), cargo package {} ({m}), {:+.2}%",
                mib(p),
                mib(m),
                (p as f64 - m as f64) * 100.0 / m as f64
            ),
            (p, m) => format!("predicted {p:?}, cargo package {m:?}"),
        };
        let driver = r
            .driver
            .map_or_else(String::new, |d| format!(", driver {d}"));
        println!("\n{krate}: plan for {}{driver}: {sizes}", mib(r.budget));
        println!("  targets:  {}", r.targets);
        println!("  compress: {}", r.compress);
        for (gpu, plan, audit) in &r.gpus {
            println!("  {gpu:<18} plan: {plan:<8} audit: {audit}");
        }
        for p in &r.problems {
            println!("  PROBLEM: {p}");
        }
    }
}
