//! Output formatting shared by the commands.
//!
//! Contract: [`Table`] renders rows like `kubectl get` (upper-case headers, columns padded to
//! their widest cell and separated by three spaces, no trailing spaces). [`Describe`] renders
//! `Key:  value` lines like `kubectl describe`, values aligned after the longest key of the block.

use std::fmt::Write as _;

/// Column separator of kubectl's tabwriter.
const GAP: &str = "   ";

/// A `kubectl get`-style table.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new<I, S>(header: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Table {
            header: header.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row (cells beyond the header are kept, missing ones are empty).
    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Whether no rows were added.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rendered table, one line per row, each ending in `\n`.
    pub fn render(&self) -> String {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut widths = vec![0; columns];
        for line in std::iter::once(&self.header).chain(&self.rows) {
            for (i, cell) in line.iter().enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in std::iter::once(&self.header).chain(&self.rows) {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = line.get(i).map(String::as_str).unwrap_or("");
                let _ = write!(text, "{cell:<width$}{GAP}");
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A `kubectl describe`-style block of `Key:  value` lines.
#[derive(Debug, Default)]
pub struct Describe {
    lines: Vec<(usize, String, String)>,
}

impl Describe {
    /// An empty block.
    pub fn new() -> Self {
        Self::default()
    }

    /// A top-level field.
    pub fn field(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.lines.push((0, key.into(), value.into()));
        self
    }

    /// A field indented under the previous one.
    pub fn nested(&mut self, key: impl Into<String>, value: impl Into<String>) -> &mut Self {
        self.lines.push((1, key.into(), value.into()));
        self
    }

    /// The rendered block.
    pub fn render(&self) -> String {
        let width = self
            .lines
            .iter()
            .map(|(depth, k, _)| depth * 2 + k.chars().count() + 1)
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for (depth, key, value) in &self.lines {
            let label = format!("{}{key}:", "  ".repeat(*depth));
            let line = format!("{label:<width$}  {value}");
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `value` or kubectl's `<none>` placeholder when empty.
pub fn or_none(value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => v.to_string(),
        _ => "<none>".into(),
    }
}

/// kubectl's message for an empty list, in one namespace or across all of them.
pub fn no_resources(all: bool, namespace: &str) -> String {
    if all {
        "No resources found\n".into()
    } else {
        format!("No resources found in {namespace} namespace.\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns_like_kubectl() {
        let mut t = Table::new(["NAME", "PHASE", "AGE"]);
        t.row(["android-0", "Running", "5m"]);
        t.row(["a", "", "10s"]);
        assert_eq!(
            t.render(),
            "NAME        PHASE     AGE\nandroid-0   Running   5m\na                     10s\n"
        );
    }

    #[test]
    fn describe_aligns_values_after_the_longest_key() {
        let mut d = Describe::new();
        d.field("Name", "x")
            .field("Suspended", "")
            .nested("Actor", "manual");
        assert_eq!(
            d.render(),
            "Name:       x\nSuspended:\n  Actor:    manual\n"
        );
    }

    #[test]
    fn empty_values_print_none() {
        assert_eq!(or_none(None), "<none>");
        assert_eq!(or_none(Some("")), "<none>");
        assert_eq!(or_none(Some("a:1")), "a:1");
    }
}
