use super::*;

#[test]
fn ranges_of_versions() {
    let v = |s: &str| s.parse::<CudaVersion>().unwrap();
    assert_eq!(version_ranges(&[v("12.8"), v("12.9")]), "CUDA 12.8-12.9");
    assert_eq!(
        version_ranges(&[
            v("13.0"),
            v("13.1"),
            v("13.2"),
            v("13.3"),
            v("13.4"),
            v("13.5")
        ]),
        "CUDA 13.0+"
    );
    assert_eq!(
        version_ranges(&[v("11.8"), v("12.9"), v("13.0")]),
        "CUDA 11.8, 12.9-13.0"
    );
    assert_eq!(version_ranges(&[]), "no known toolkit");
}
