//! The options of a lock, as clap arguments `audit` and `diff` flatten into theirs, resolved
//! once into [`Settings`].

use crate::{LockError, Settings, Target};

#[derive(Clone, Debug, Default, clap::Args)]
pub struct LockArgs {
    /// For a lock or requirements file (pylock.toml, uv.lock, requirements*.txt): the platform
    /// its wheels are chosen for, linux_x86_64, linux_aarch64 or manylinux_2_X_MACHINE
    /// [default: linux_x86_64 with glibc 2.35]
    #[arg(long, value_name = "PLATFORM")]
    pub platform: Option<String>,
    /// For a lock or requirements file: the CPython its wheels are chosen for [default: 3.12]
    #[arg(long, value_name = "X.Y")]
    pub python_version: Option<String>,
    /// For a lock or requirements file: fetch nothing; every wheel must be in fatkit's wheel
    /// store already (a run before, with the network, fetched them)
    #[arg(long)]
    pub offline: bool,
}

impl LockArgs {
    /// The settings, with the wheel store in fatkit's cache (`<cache>/wheels`; no cache
    /// directory is an error only where a lock's wheels are wanted).
    pub fn settings(&self) -> Result<Settings, LockError> {
        let cache = fatkit_toolchain::cache_dir().ok();
        let mut target = Target::default();
        if let Some(p) = &self.platform {
            target = target.with_platform(p)?;
        }
        if let Some(v) = &self.python_version {
            target = target.with_python(v)?;
        }
        Ok(Settings {
            target,
            offline: self.offline,
            ..Settings::new(cache.map(|c| c.join("wheels")))
        })
    }
}
