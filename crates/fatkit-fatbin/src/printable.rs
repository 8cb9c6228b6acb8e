//! Names read from inputs (kernel names, archive members, file paths), made safe to print: a
//! crafted name holding a newline or a terminal escape must not forge a line of a report.

use std::borrow::Cow;

/// `name` with every control character written as its Rust escape (`\n`, `\u{1b}`); a name
/// without any (every real one) is returned as it is.
pub fn printable(name: &str) -> Cow<'_, str> {
    if !name.chars().any(char::is_control) {
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
    }
}
