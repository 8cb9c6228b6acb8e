use super::*;
use crate::Target;

fn env() -> Environment {
    let extras = ["cuda".to_owned()].into_iter().collect();
    Target::default().environment(extras, BTreeSet::new())
}

#[test]
fn markers_hold_as_pep_508_says_on_the_target() {
    let cases = [
        ("", true),
        ("sys_platform == 'linux'", true),
        ("sys_platform == 'win32'", false),
        (
            "platform_machine == 'x86_64' and sys_platform == 'linux'",
            true,
        ),
        (
            "platform_machine == 'aarch64' or python_version >= '3.10'",
            true,
        ),
        ("python_version < '3.10'", false),
        ("python_version >= '3.9' and python_version < '3.13'", true),
        ("python_full_version >= '3.12.1'", false),
        ("python_full_version >= '3.12'", true),
        ("python_version == '3.*'", true),
        ("python_version != '3.12.*'", false),
        ("python_version ~= '3.10'", true),
        (
            "(sys_platform == 'darwin' or sys_platform == 'linux') and extra == 'cuda'",
            true,
        ),
        ("extra == 'cpu'", false),
        ("extra != 'cpu'", true),
        ("'cuda' in extras", true),
        ("'dev' in dependency_groups", false),
        ("'linux' in sys_platform", true),
        ("'win' not in sys_platform", true),
        ("implementation_name == \"cpython\"", true),
        ("platform_system != 'Windows'", true),
    ];
    for (marker, want) in cases {
        assert_eq!(holds(marker, &env()), Ok(want), "{marker}");
    }
}

#[test]
fn a_marker_that_does_not_parse_is_an_error_not_an_answer() {
    for bad in [
        "sys_platform ==",
        "sys_platform = 'linux'",
        "cpu_count > '4'",
        "(sys_platform == 'linux'",
        "sys_platform == 'linux' or",
        "sys_platform == 'linux",
        "python_version not '3'",
        "sys_platform == 'linux' sys_platform",
        "\u{1b}[2J == 'x'",
    ] {
        assert!(holds(bad, &env()).is_err(), "{bad}");
    }
    let deep = format!(
        "{}sys_platform == 'linux'{}",
        "(".repeat(100),
        ")".repeat(100)
    );
    assert!(holds(&deep, &env()).is_err());
}

#[test]
fn names_normalise_as_pep_503_says() {
    assert_eq!(normalize("Nvidia_CUBLAS.cu12"), "nvidia-cublas-cu12");
    assert_eq!(normalize("torch"), "torch");
    assert_eq!(normalize("a--b__c"), "a-b-c");
}
