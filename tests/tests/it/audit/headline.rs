//! The first line answers what was asked: on several GPUs (`--gpu` twice, `--matrix`), the
//! answer on each, the same as asking about that GPU alone.
#![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]

use super::fixtures::audit;

/// The headline's answer for each GPU: `NO on V100; yes, by PTX JIT on A100, H100 (...)`
/// read back into (GPU, word) pairs.
fn words_by_gpu(headline: &str) -> Vec<(String, String)> {
    let mut answer = headline.split_once(": ").unwrap().1.to_owned();
    // A JIT group says the driver it needs in parentheses: not part of the GPUs' names.
    while let Some(at) = answer.find(" (JIT needs ") {
        let end = answer[at..].find(')').unwrap() + at + 1;
        answer.replace_range(at..end, "");
    }
    // Then the driver, where one was given, and the kernels, each in parentheses.
    let answer = answer.split_once(" (").unwrap().0;
    let mut out = Vec::new();
    for group in answer.split("; ") {
        let (word, gpus) = group.split_once(" on ").unwrap();
        out.extend(gpus.split(", ").map(|g| (g.to_owned(), word.to_owned())));
    }
    out
}

/// The word of a one-GPU headline: `x.fatbin: PARTLY on T4 (CC 7.5): ...` -> `PARTLY`.
fn word_alone(headline: &str, gpu: &str) -> String {
    let answer = headline.split_once(": ").unwrap().1;
    answer
        .split_once(&format!(" on {gpu} (CC"))
        .unwrap_or_else(|| panic!("{headline}"))
        .0
        .to_owned()
}

/// Every fixture under the GPU sets and with a driver too old for its PTX: each GPU of the
/// several-GPU headline carries the word asking about it alone gives, and every GPU asked
/// about is in it once.
#[test]
fn the_headline_on_several_gpus_says_on_each_what_asking_about_it_alone_says() {
    let mut seen_words = std::collections::BTreeSet::new();
    for file in [
        "plain.fatbin",
        "ptx-jit.fatbin",
        "speed.fatbin",
        "size.fatbin",
    ] {
        for extra in [
            &["--matrix"][..],
            &["--matrix=consumer"],
            &["--gpu", "T4", "--gpu", "H100", "--driver", "450.80.02"],
            // Comma-separated, and a GPU of the set named again: each asked about once.
            &["--gpu", "T4,H100", "--matrix"],
        ] {
            let mut args = vec![file];
            args.extend(extra);
            let (_, out, err) = audit(&args);
            let headline = out.lines().next().unwrap_or_else(|| panic!("{err}"));
            let words = words_by_gpu(headline);
            assert!(words.len() >= 2, "{headline}");
            let driver: Vec<&str> = extra
                .windows(2)
                .find(|w| w[0] == "--driver")
                .map_or_else(Vec::new, |w| w.to_vec());
            for (gpu, word) in &words {
                let mut alone = vec![file, "--gpu", gpu.as_str()];
                alone.extend(&driver);
                let (_, single, _) = audit(&alone);
                let first = single.lines().next().unwrap();
                assert_eq!(
                    &word_alone(first, gpu),
                    word,
                    "{file} {extra:?}: {headline}\n{first}"
                );
                seen_words.insert(word.clone());
            }
            let gpus: std::collections::BTreeSet<&String> = words.iter().map(|(g, _)| g).collect();
            assert_eq!(gpus.len(), words.len(), "each GPU once: {headline}");
        }
    }
    // The fixtures give more than one answer, so the grouping is tested.
    assert!(seen_words.len() >= 2, "{seen_words:?}");
}
