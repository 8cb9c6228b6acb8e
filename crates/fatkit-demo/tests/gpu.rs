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
    assert_eq!(outcomes.len(), 4);
    assert!(outcomes.iter().all(|o| o.ok()), "{outcomes:?}");
}
