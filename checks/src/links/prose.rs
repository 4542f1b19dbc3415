//! The prose of a Markdown text: its lines outside fenced code blocks, where both links and
//! citations are read (a fence shows code, whose text is not the document's own).

/// The lines of a Markdown text that are not in a fenced code block, numbered from 1.
pub(super) fn prose_lines(markdown: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut fence: Option<String> = None;
    markdown.lines().enumerate().filter_map(move |(i, line)| {
        let trimmed = line.trim_start();
        let first = trimmed.chars().next().filter(|&c| c == '`' || c == '~');
        let marker: String = trimmed.chars().take_while(|&c| Some(c) == first).collect();
        let opens = marker.len() >= 3;
        match &fence {
            Some(open) if opens && marker.starts_with(open.as_str()) => {
                fence = None;
                None
            }
            Some(_) => None,
            None if opens && line.len() - trimmed.len() <= 3 => {
                fence = Some(marker);
                None
            }
            None => Some((i + 1, line)),
        }
    })
}
