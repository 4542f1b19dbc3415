//! The live table on a terminal, drawn so that each line it prints takes exactly one row of
//! the screen: lines are cut to the terminal's width (a wrapped line would take two rows, and
//! moving back over the drawing would land in the wrong place), and a table taller than the
//! screen shows the rows that fit and a `+N more` line. After a resize the screen is cleared
//! and the table drawn from the top.

use std::io::Write;

/// Columns and rows of the terminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Size {
    pub columns: usize,
    pub rows: usize,
}

pub struct Screen {
    /// Lines of the last drawing, and the size it was drawn for.
    drawn: usize,
    size: Option<Size>,
}

impl Screen {
    pub fn new() -> Self {
        Self {
            drawn: 0,
            size: None,
        }
    }

    pub fn draw(&mut self, out: &mut impl Write, table: &str, footer: &str) -> std::io::Result<()> {
        let size = size().unwrap_or(Size {
            columns: 80,
            rows: 24,
        });
        let lines = fit(table, footer, size);
        if self.size.is_some_and(|s| s != size) {
            // The old drawing reflowed: its rows are not known any more.
            write!(out, "\x1b[H\x1b[2J")?;
        } else if self.drawn > 0 {
            write!(out, "\x1b[{}F\x1b[J", self.drawn)?;
        }
        for line in &lines {
            writeln!(out, "{line}")?;
        }
        self.drawn = lines.len();
        self.size = Some(size);
        Ok(())
    }
}

/// The terminal's size, as `stty size` reads it from the controlling terminal.
fn size() -> Option<Size> {
    let tty = std::fs::File::open("/dev/tty").ok()?;
    let output = std::process::Command::new("stty")
        .arg("size")
        .stdin(tty)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let mut words = text.split_whitespace().map(str::parse::<usize>);
    let rows = words.next()?.ok()?;
    let columns = words.next()?.ok()?;
    (rows > 0 && columns > 0).then_some(Size { columns, rows })
}

/// The lines to draw for `table` (a header and a line per pod) and `footer` on a screen of
/// `size`: each cut to one column less than the width (no line reaches the last column, where
/// terminals differ on when they wrap), and no more than one line less than the height.
pub fn fit(table: &str, footer: &str, size: Size) -> Vec<String> {
    let width = size.columns.saturating_sub(1).max(1);
    let cut = |line: &str| -> String {
        if line.chars().count() <= width {
            line.to_owned()
        } else {
            let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
            cut.push('>');
            cut
        }
    };
    let mut lines: Vec<&str> = table.lines().collect();
    // Header, rows, footer within rows - 1 lines; when cut, a `+N more` line takes a row.
    let room = size.rows.saturating_sub(2).max(2);
    let mut more = None;
    if lines.len() > room {
        let keep = room - 1;
        more = Some(format!("+{} more", lines.len() - keep));
        lines.truncate(keep);
    }
    let mut out: Vec<String> = lines.into_iter().map(cut).collect();
    out.extend(more.as_deref().map(cut));
    out.push(cut(footer));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_fit_the_width_and_a_tall_table_the_height() {
        let table =
            "POD  STATE\nshop/a-0  Waiting\nshop/b-0  Waiting\nshop/c-0  Waiting\nshop/d-0  Gone";
        let small = Size {
            columns: 12,
            rows: 5,
        };
        assert_eq!(
            fit(table, "[#...] 1/4 pods evicted", small),
            ["POD  STATE", "shop/a-0  >", "+3 more", "[#...] 1/4>"]
        );
        let large = Size {
            columns: 80,
            rows: 24,
        };
        let all = fit(table, "bar", large);
        assert_eq!(all.len(), 6);
        assert!(all.iter().all(|l| l.chars().count() < 80));
    }
}
