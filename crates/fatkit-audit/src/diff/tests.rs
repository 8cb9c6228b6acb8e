use super::{distribution_of, file_key_of, Kind};

#[test]
fn a_library_is_one_across_cuda_majors_and_so_versions() {
    let d = |p: &str| distribution_of(p).unwrap_or_default();
    assert_eq!(d("nvidia_cublas_cu12 12.4.5.8"), "nvidia_cublas");
    assert_eq!(d("nvidia_cublas 13.4.1.3"), "nvidia_cublas");
    assert_eq!(d("nvidia-cudnn-cu13 9.26"), "nvidia-cudnn");
    assert_eq!(d("torch 2.15.0"), "torch");
    // Not a CUDA major: kept.
    assert_eq!(d("my_cuda 1.0"), "my_cuda");
    assert_eq!(d("pkg_cu 1.0"), "pkg_cu");
    assert_eq!(
        file_key_of("nvidia/cublas/lib/libcublas.so.12"),
        "libcublas.so"
    );
    assert_eq!(
        file_key_of("nvidia/cu13/lib/libcublas.so.13"),
        "libcublas.so"
    );
    assert_eq!(file_key_of("a/libcupti.so.2025.1.1"), "libcupti.so");
    assert_eq!(
        file_key_of("x.whl(torch/lib/libtorch_cuda.so)"),
        "libtorch_cuda.so"
    );
    assert_eq!(file_key_of("lib/libfoo.so.1beta"), "libfoo.so.1beta");
}

#[test]
fn every_kind_has_a_name_and_regressions_come_first() {
    for k in Kind::ALL {
        assert_eq!(Kind::named(k.name()), Some(k));
    }
    let first_improvement = Kind::ALL.iter().position(|k| !k.regression()).unwrap_or(0);
    assert!(Kind::ALL[first_improvement..]
        .iter()
        .all(|k| !k.regression()));
    assert_eq!(first_improvement, 9);
}
