//! A line diff for `replay --diff`: the longest common subsequence of two
//! renderings, printed as unified-diff hunks (`-` old, `+` new, three lines of
//! context). Resources render to tens or hundreds of lines, so the quadratic table
//! is small; past [`MAX_CELLS`] the diff falls back to "all old lines removed, all
//! new lines added", which is still correct, only less focused.
//!
//! What it does NOT do: render resources (see `admin::render`).

/// Largest LCS table (old lines × new lines) computed.
const MAX_CELLS: usize = 4_000_000;

/// Lines of unchanged context around each change.
const CONTEXT: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Del,
    Add,
}

fn ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let (n, m) = (a.len(), b.len());
    if n.saturating_mul(m) > MAX_CELLS {
        let mut out: Vec<(Op, &str)> = a.iter().map(|l| (Op::Del, *l)).collect();
        out.extend(b.iter().map(|l| (Op::Add, *l)));
        return out;
    }
    // lcs[i][j] = LCS length of a[i..] and b[j..].
    let w = m + 1;
    let mut lcs = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * w + j] = if a[i] == b[j] {
                lcs[(i + 1) * w + j + 1] + 1
            } else {
                lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(n + m);
    while i < n && j < m {
        if a[i] == b[j] {
            out.push((Op::Same, a[i]));
            i += 1;
            j += 1;
        } else if lcs[(i + 1) * w + j] >= lcs[i * w + j + 1] {
            out.push((Op::Del, a[i]));
            i += 1;
        } else {
            out.push((Op::Add, b[j]));
            j += 1;
        }
    }
    out.extend(a[i..].iter().map(|l| (Op::Del, *l)));
    out.extend(b[j..].iter().map(|l| (Op::Add, *l)));
    out
}

/// The unified diff of `old` and `new` (empty when equal), each line prefixed
/// with `indent`.
pub(crate) fn unified(old: &str, new: &str, indent: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let all = ops(&a, &b);
    let changed: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, (op, _))| *op != Op::Same)
        .map(|(i, _)| i)
        .collect();
    let mut out = String::new();
    let mut k = 0;
    while k < changed.len() {
        let start = changed[k].saturating_sub(CONTEXT);
        let mut end = changed[k];
        while k + 1 < changed.len() && changed[k + 1] <= end + 2 * CONTEXT + 1 {
            k += 1;
            end = changed[k];
        }
        let end = (end + CONTEXT + 1).min(all.len());
        // Line numbers of the hunk in old and new (1-based).
        let old_line = 1 + all[..start].iter().filter(|(op, _)| *op != Op::Add).count();
        let new_line = 1 + all[..start].iter().filter(|(op, _)| *op != Op::Del).count();
        let old_len = all[start..end]
            .iter()
            .filter(|(op, _)| *op != Op::Add)
            .count();
        let new_len = all[start..end]
            .iter()
            .filter(|(op, _)| *op != Op::Del)
            .count();
        out.push_str(&format!(
            "{indent}@@ -{old_line},{old_len} +{new_line},{new_len} @@\n"
        ));
        for (op, line) in &all[start..end] {
            let sign = match op {
                Op::Same => ' ',
                Op::Del => '-',
                Op::Add => '+',
            };
            out.push_str(&format!("{indent}{sign}{line}\n"));
        }
        k += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_come_with_context_and_line_numbers() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nb\nc\nd\nE\nf\ng\nh\ni\nj\nk\n";
        let d = unified(old, new, "  ");
        assert_eq!(
            d,
            "  @@ -2,9 +2,10 @@\n   b\n   c\n   d\n  -e\n  +E\n   f\n   g\n   h\n   i\n   j\n  +k\n"
        );
        assert_eq!(unified(old, old, ""), "");
        assert_eq!(unified("", "x\n", ""), "@@ -1,0 +1,1 @@\n+x\n");
    }
}
