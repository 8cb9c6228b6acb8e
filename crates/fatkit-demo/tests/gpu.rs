//! GPU tier (ignored without a GPU): every kernel of the demo computes what the CPU does.
//! `cargo test -p fatkit-runtime -p fatkit-demo --test gpu -- --ignored --nocapture`

#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p fatkit-demo --test gpu -- --ignored"]
fn every_kernel_matches_the_cpu() {
    let modules = fatkit_demo::Modules::embedded().unwrap();
    let (device, outcomes) = fatkit_demo::run(&modules).unwrap_or_else(|e| panic!("{e}"));
    println!("{} (CC {})", device.name, device.cc);
    for o in &outcomes {
        println!("  {:<16} max error {:.2e}", o.kernel, o.max_error);
    }
    assert_eq!(outcomes.len(), 11, "a typed launch of every kernel");
    assert!(outcomes.iter().all(|o| o.ok()), "{outcomes:?}");
}

/// A launch declared with the wrong argument sizes is refused before the driver sees it: the
/// buffer it would have written is untouched.
#[test]
#[ignore = "needs an NVIDIA GPU: cargo test -p fatkit-demo --test gpu -- --ignored"]
fn a_mismatched_launch_is_refused_before_the_driver() {
    use cudarc::driver::{CudaContext, LaunchConfig};
    let modules = fatkit_demo::Modules::embedded().unwrap();
    let ctx = CudaContext::new(0).unwrap();
    let stream = ctx.default_stream();
    let m = modules.saxpy.load(&ctx).unwrap();
    let saxpy = m.kernel("saxpy").unwrap();
    let x = stream.clone_htod(&[1.0f32; 256]).unwrap();
    let mut y = stream.clone_htod(&[5.0f32; 256]).unwrap();
    let cfg = LaunchConfig::for_num_elems(256);
    // n as usize and a as f64: 8 bytes each where the kernel takes 4.
    let err = saxpy
        .launch(&stream, cfg, (256usize, 2.0f64, &x, &mut y))
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("kernel 'saxpy' of module 'saxpy': parameter 0 (at byte 0) is 4 bytes, the launch gives 8 (usize)"),
        "{err}"
    );
    stream.synchronize().unwrap();
    assert!(stream.clone_dtoh(&y).unwrap().iter().all(|&v| v == 5.0));
    // The right one runs, from another thread: the module and kernel are Send + Sync.
    let handle = std::thread::spawn(move || {
        saxpy
            .launch(&stream, cfg, (256i32, 2.0f32, &x, &mut y))
            .unwrap();
        stream.clone_dtoh(&y).unwrap()
    });
    assert!(handle.join().unwrap().iter().all(|&v| v == 7.0));
    drop(m);
}
