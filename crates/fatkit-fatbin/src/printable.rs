//! Names read from inputs (kernel names, archive members, file paths), made safe to print: a
//! crafted name holding a newline or a terminal escape must not forge a line of a report.

use std::borrow::Cow;

/// `name` with every control character written as its Rust escape (`\n`, `\u{1b}`); a name
/// without any (every real one) is returned as it is.
pub fn printable(name: &str) -> Cow<'_, str> {
    // Control characters are U+0000-U+001F, U+007F and U+0080-U+009F: in UTF-8, a byte below
    // 0x20, 0x7F, or 0xC2 then 0x80-0x9F. A name with none of those bytes (every mangled
    // kernel name) is passed at the speed of a byte scan, its characters never decoded.
    // A fold, not `any`: no early exit, so the compiler scans many bytes at a time.
    let may_hold = name.as_bytes().iter().fold(false, |seen, &b| {
        seen | (b < 0x20) | (b == 0x7f) | (b == 0xc2)
    });
    if !may_hold || !name.chars().any(char::is_control) {
        return Cow::Borrowed(name);
    }
    Cow::Owned(
        name.chars()
            .map(|c| match c.is_control() {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
            .collect(),
    )
}

/// `text` made [`printable`] in place.
pub fn escape(text: &mut String) {
    if let Cow::Owned(shown) = printable(text) {
        *text = shown;
    }
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_escaped_and_nothing_else() {
        assert!(matches!(
            printable("_Z5saxpyPf"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(printable("k\nyes on RTX 5090"), "k\\nyes on RTX 5090");
        assert_eq!(printable("a\u{1b}[31mred"), "a\\u{1b}[31mred");
        assert_eq!(printable("lib/\u{e9}t\u{e9}.so"), "lib/\u{e9}t\u{e9}.so");
        // Every character of the first 0x800 (one- and two-byte UTF-8) is escaped exactly
        // where `char::is_control` says so: the byte scan lets none through.
        for c in (0..0x800u32).filter_map(char::from_u32) {
            let text = format!("a{c}b");
            assert_eq!(printable(&text) != text, c.is_control(), "{:#x}", c as u32);
        }
    }
}
