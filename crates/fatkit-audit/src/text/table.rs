//! Plain text tables for people: columns padded to their widest cell, the last one not.

/// Renders `rows` under `headers`, two spaces between columns.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n_cols = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header_row: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header_row).chain(rows) {
        let mut line = String::new();
        for (idx, cell) in row.iter().enumerate().take(n_cols) {
            if idx + 1 == n_cols {
                line.push_str(cell);
            } else {
                let width = widths.get(idx).copied().unwrap_or(0);
                line.push_str(&format!("{cell:<width$}  "));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn aligns_columns() {
        let rows = vec![vec!["a".to_owned(), "long cell".to_owned(), "x".to_owned()]];
        assert_eq!(
            super::render(&["H1", "H2", "H3"], &rows),
            "H1  H2         H3\na   long cell  x\n"
        );
    }
}
