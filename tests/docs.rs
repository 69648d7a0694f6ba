//! The documentation's SQL examples run as written. Every fenced block of README.md and
//! docs/**/*.md whose info string starts with `sql` is executed, in page order, in a fresh
//! database per page (jobq installed, the background worker serving it, default settings), as
//! the superuser, on one connection per page, each block as one simple-query batch:
//! - ```` ```sql ```` must succeed;
//! - ```` ```sql error=22023 ```` must fail with exactly that SQLSTATE (its effects roll back);
//! - ```` ```sql norun ```` is shown only (fragments with placeholders, other servers).
//!
//! Every failure of every page is listed, with the page and line of its block.
mod common;

use common::*;
use std::path::{Path, PathBuf};

/// A fenced ```sql block: where it starts, what it expects, what it says.
struct Block {
    line: usize,
    expect: Expect,
    sql: String,
}

#[derive(Debug, PartialEq)]
enum Expect {
    Success,
    Error(String),
    NotRun,
}

/// A fence being read: its marker, its indentation, what its block expects (None: not sql),
/// its lines so far and the line it opened on.
struct Open<'a> {
    fence: String,
    indent: usize,
    expect: Option<Expect>,
    lines: Vec<&'a str>,
    line: usize,
}

/// The ```sql blocks of a Markdown page (fences of ``` or ~~~, indented or not).
fn sql_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Open> = None;
    for (n, raw) in text.lines().enumerate() {
        let trimmed = raw.trim_start();
        let indent = raw.len() - trimmed.len();
        match &mut open {
            None => {
                let fence: String = trimmed.chars().take_while(|&c| c == '`' || c == '~').collect();
                if fence.len() >= 3 && fence.chars().all(|c| c == fence.chars().next().unwrap()) {
                    let info: Vec<&str> = trimmed[fence.len()..].split_whitespace().collect();
                    let expect = match info.first() {
                        Some(&"sql") => Some(match info.get(1) {
                            None => Expect::Success,
                            Some(&"norun") => Expect::NotRun,
                            Some(w) if w.starts_with("error=") => Expect::Error(w["error=".len()..].to_string()),
                            Some(w) => panic!("line {}: unknown sql block option {w}", n + 1),
                        }),
                        _ => None,
                    };
                    open = Some(Open { fence, indent, expect, lines: Vec::new(), line: n + 1 });
                }
            }
            Some(o) => {
                let mark = o.fence.chars().next().unwrap();
                if trimmed.starts_with(o.fence.as_str()) && trimmed.trim_end().chars().all(|c| c == mark) {
                    if let Some(expect) = o.expect.take() {
                        blocks.push(Block { line: o.line, expect, sql: o.lines.join("\n") });
                    }
                    open = None;
                } else {
                    let cut = raw.len().min(o.indent).min(indent);
                    o.lines.push(&raw[cut..]);
                }
            }
        }
    }
    assert!(open.is_none(), "a fenced block is not closed");
    blocks
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut out);
    out.sort();
    out
}

#[test]
fn the_parser_reads_fences_options_and_indentation() {
    let page = "text\n```sql\nSELECT 1;\n```\n- item\n  ```sql error=22023\n  SELECT jobq_enqueue('');\n  ```\n~~~sql norun\nSELECT $1;\n~~~\n```python\nprint()\n```\n````sql\n```\n````\n";
    let blocks = sql_blocks(page);
    let got: Vec<(usize, &Expect, &str)> = blocks.iter().map(|b| (b.line, &b.expect, b.sql.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (2, &Expect::Success, "SELECT 1;"),
            (6, &Expect::Error("22023".into()), "SELECT jobq_enqueue('');"),
            (9, &Expect::NotRun, "SELECT $1;"),
            (15, &Expect::Success, "```"),
        ]
    );
}

#[test]
fn every_sql_example_of_the_docs_runs() {
    let cluster = Cluster::start("docs", &[]);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    let mut ran = 0;
    for page in pages() {
        let blocks = sql_blocks(&std::fs::read_to_string(&page).unwrap());
        if blocks.iter().all(|b| b.expect == Expect::NotRun) {
            continue;
        }
        let db = cluster.fresh_db();
        let mut c = cluster.connect(&db);
        let name = page.strip_prefix(root).unwrap().display().to_string();
        for b in blocks {
            let result = match b.expect {
                Expect::NotRun => continue,
                _ => c.batch_execute(&b.sql),
            };
            ran += 1;
            match (&b.expect, result) {
                (Expect::Success, Ok(())) => {}
                (Expect::Success, Err(e)) => failures.push(format!("{name}:{}: {e} ({})", b.line, sqlstate(&e))),
                (Expect::Error(code), Ok(())) => failures.push(format!("{name}:{}: succeeded, expected {code}", b.line)),
                (Expect::Error(code), Err(e)) if sqlstate(&e) == *code => {}
                (Expect::Error(code), Err(e)) => failures.push(format!("{name}:{}: expected {code}, got {e} ({})", b.line, sqlstate(&e))),
                (Expect::NotRun, _) => unreachable!(),
            }
        }
    }
    assert!(ran >= 20, "the SQL reference has runnable examples ({ran} found)");
    assert!(failures.is_empty(), "{} of {ran} examples failed:\n{}", failures.len(), failures.join("\n"));
}
