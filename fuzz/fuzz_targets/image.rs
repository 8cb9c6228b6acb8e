#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| fatkit_fuzz::image(data));
