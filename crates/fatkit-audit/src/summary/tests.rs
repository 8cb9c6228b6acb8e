use super::*;

#[test]
fn releases_sort_as_numbers() {
    let set: BTreeSet<String> = ["10.1", "7.5", "12.8", "9.0", "odd"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(by_release(set), ["7.5", "9.0", "10.1", "12.8", "odd"]);
}
