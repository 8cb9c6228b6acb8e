use super::*;

#[test]
fn releases_sort_as_numbers() {
    let set: BTreeSet<String> = ["10.1", "7.5", "12.8", "9.0", "odd"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(by_release(set), ["7.5", "9.0", "10.1", "12.8", "odd"]);
}

#[test]
fn a_ptx_cell_says_its_driver_as_a_release_or_as_a_cuda_level() {
    let cell = |d: &str, numbered| {
        super::Cell::Ptx {
            driver: Some(d.to_owned()),
            numbered,
        }
        .text()
    };
    assert_eq!(cell("595.45.04", true), "PTX JIT (driver >= 595.45.04)");
    assert_eq!(
        cell("a CUDA 13.4 driver", false),
        "PTX JIT (a CUDA 13.4 driver or newer)"
    );
}
