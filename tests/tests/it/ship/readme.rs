//! What README.md says, read by the tests that hold the code to it.
#![allow(clippy::unwrap_used, clippy::panic)]

/// What README.md's "Package a release" says COVERAGE.md holds for `full`: the lines of its
/// `text` block (a `(...)` cut where the list goes on) and the V100 row it quotes.
pub(crate) fn release_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(fatkit_tests::repo_root().join("README.md")).unwrap();
    let section = readme
        .split_once("## Package a release")
        .and_then(|(_, rest)| rest.split_once("\n## "))
        .map(|(section, _)| section)
        .unwrap_or_else(|| panic!("README.md: no release section"));
    let block = section
        .split_once("```text\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .map(|(block, _)| block)
        .unwrap_or_else(|| panic!("README.md: the release section has no COVERAGE.md lines"));
    let mut lines: Vec<String> = block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.trim_end_matches(" (...)").to_owned())
        .collect();
    let row = section
        .split_once("the V100's row says `")
        .and_then(|(_, rest)| rest.split_once('`'))
        .map(|(row, _)| row.to_owned())
        .unwrap_or_else(|| panic!("README.md: the release section quotes no V100 row"));
    lines.push(row);
    assert!(lines.len() >= 3, "{lines:?}");
    lines
}

/// Panics unless `md` (a `package` COVERAGE.md for `full`) holds every [`release_lines`].
pub(crate) fn holds_release_lines(md: &str) {
    for line in release_lines() {
        assert!(
            md.contains(&line),
            "README.md says {line:?}; COVERAGE.md:\n{md}"
        );
    }
}
