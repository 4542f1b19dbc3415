//! kubectl's table for people: upper-case headers, columns padded to their widest cell and
//! two spaces apart, no trailing blanks; a row may carry indented detail lines below it. One
//! printer for every table evictkit prints (`kubectl evictkit`, `pdb-policy-webhook explain`).

use jiff::Timestamp;

/// A table being built: a header, then rows, each with its detail lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<(Vec<String>, Vec<String>)>,
}

impl Table {
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; cells beyond the header's are dropped, missing ones are empty.
    pub fn row(&mut self, cells: Vec<String>) -> &mut Self {
        self.rows.push((cells, Vec::new()));
        self
    }

    /// Adds a line below the last row, indented by four spaces and not aligned to the columns.
    pub fn detail(&mut self, line: impl Into<String>) -> &mut Self {
        if let Some((_, details)) = self.rows.last_mut() {
            details.push(line.into());
        }
        self
    }

    /// The table as text, one `\n`-terminated line per row and detail.
    pub fn render(&self) -> String {
        let columns = self.header.len();
        fn cell(cells: &[String], i: usize) -> &str {
            cells.get(i).map_or("", String::as_str)
        }
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for (cells, _) in &self.rows {
            for (i, width) in widths.iter_mut().enumerate() {
                *width = (*width).max(cell(cells, i).chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = (0..columns)
                .map(|i| format!("{:<width$}", cell(cells, i), width = widths[i]))
                .collect();
            format!("{}\n", padded.join("  ").trim_end())
        };
        let mut out = line(&self.header);
        for (cells, details) in &self.rows {
            out.push_str(&line(cells));
            for detail in details {
                out.push_str(&format!("    {detail}\n"));
            }
        }
        out
    }
}

/// An age in kubectl's coarse units: seconds up to two minutes, then minutes, hours, days
/// (a time after `now` is `0s`).
pub fn age(now: Timestamp, then: Timestamp) -> String {
    let seconds = now.duration_since(then).as_secs().max(0);
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7_200 => format!("{}m", seconds / 60),
        7_200..172_800 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_use_kubectls_coarse_units() {
        let now: Timestamp = "2026-11-25T12:00:00Z".parse().unwrap();
        let ago = |seconds: i64| age(now, now - jiff::SignedDuration::from_secs(seconds));
        assert_eq!(
            [
                ago(5),
                ago(119),
                ago(120),
                ago(7_199),
                ago(7_200),
                ago(172_800),
                ago(-3)
            ],
            ["5s", "119s", "2m", "119m", "2h", "2d", "0s"].map(String::from)
        );
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_details_are_indented() {
        let cells = |c: &[&str]| c.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
        let mut table = Table::new(&["POD", "STATE", "MESSAGE"]);
        table
            .row(cells(&["shop/web-0", "InProgress", "backing up"]))
            .detail("PDB web: minAvailable=2")
            .row(cells(&["shop/a", "Gone", ""]))
            .row(cells(&["shop/ünïcode", "x"]));
        #[rustfmt::skip]
        let expected = [
            "POD           STATE       MESSAGE",
            "shop/web-0    InProgress  backing up",
            "    PDB web: minAvailable=2",
            "shop/a        Gone",
            "shop/ünïcode  x",
        ];
        assert_eq!(table.render().lines().collect::<Vec<_>>(), expected);
        assert_eq!(Table::new(&["A", "B"]).render(), "A  B\n");
        // A detail before any row has nowhere to go.
        assert_eq!(Table::new(&["A"]).detail("x").render(), "A\n");
    }
}
