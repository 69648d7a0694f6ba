//! What deploy/ ships beside the dashboard: the Prometheus alert rules, checked and unit-tested
//! by promtool (Debian's prometheus package), with the health page's red thresholds. (That
//! every metric they and the Grafana dashboard query is one /metrics serves is checked in
//! handlers.rs, against a real scrape.)

use jobq_dash::thresholds::{ALL, DEAD_ROWS, DEAD_ROWS_MIN};
use std::path::PathBuf;
use std::process::Command;

fn deploy(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy").join(path)
}

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(deploy("prometheus"))
        .output()
        .expect("promtool (Debian's prometheus package; scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    promtool(&["check", "rules", "jobq-alerts.yml"]);
    promtool(&["test", "rules", "jobq-alerts.test.yml"]);
}

/// The rules of jobq-alerts.yml: each one's name and its lines (a YAML reader for this one
/// file's layout: `- alert:` then its keys, one a line).
fn rules() -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(deploy("prometheus/jobq-alerts.yml")).unwrap();
    text.split("- alert: ")
        .skip(1)
        .map(|r| {
            let mut lines = r.lines().map(|l| l.trim().to_string());
            (lines.next().unwrap(), lines.filter(|l| !l.is_empty() && !l.starts_with('#')).collect())
        })
        .collect()
}

/// The value of key `key` among a rule's lines, unquoted.
fn value<'a>(lines: &'a [String], key: &str) -> Option<&'a str> {
    lines.iter().find_map(|l| l.strip_prefix(key)?.strip_prefix(": ")).map(|v| v.trim_matches('\''))
}

/// Each figure of the health page is red exactly where its alert rule fires: the rule compares
/// the figure's metric with `> red` (before any `unless` or `and` that narrows it).
#[test]
fn each_alert_fires_at_the_health_pages_red_threshold() {
    let rules = rules();
    for c in ALL {
        let (_, lines) = rules.iter().find(|(name, _)| name == c.alert).unwrap_or_else(|| panic!("no rule {}", c.alert));
        let expr = value(lines, "expr").unwrap();
        let at = expr.find(c.metric).unwrap_or_else(|| panic!("{}: {expr} does not read {}", c.alert, c.metric));
        let comparison = expr[at..].split(" unless ").next().unwrap().split(" and ").next().unwrap();
        assert!(comparison.ends_with(&format!("> {}", c.red)), "{}: {expr} against {} > {}", c.alert, c.metric, c.red);
        // Dead rows count, there as on the health page, only in tables with many of them.
        if c.alert == DEAD_ROWS.alert {
            assert!(expr.starts_with(&format!("jobq_table_dead_rows > {DEAD_ROWS_MIN} and ")), "{expr}");
        }
    }
}

/// The documented base of every rule's runbook_url (docs/monitoring.md, "Alert rules").
const RUNBOOK_BASE: &str = "https://jobq.example.org/docs/monitoring.md#";

/// GitHub's anchor of a heading: lowercase, punctuation but '-' and '_' dropped, spaces '-'.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_' || *c == ' ')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every rule: a `for` (none fires on one evaluation), a severity, a summary and a description,
/// and an absolute runbook_url under the documented base whose anchor is a section of
/// docs/monitoring.md.
#[test]
fn every_rule_has_a_for_a_description_and_a_runbook_that_exists() {
    let docs = std::fs::read_to_string(deploy("../docs/monitoring.md")).unwrap();
    assert!(docs.contains(RUNBOOK_BASE.trim_end_matches('#')), "docs/monitoring.md documents the runbooks' base");
    let anchors: Vec<String> = docs.lines().filter_map(|l| l.strip_prefix('#')).map(|h| slug(h.trim_start_matches('#'))).collect();
    let rules = rules();
    assert_eq!(rules.len(), 9, "{:?}", rules.iter().map(|r| &r.0).collect::<Vec<_>>());
    for (name, lines) in &rules {
        for key in ["expr", "for", "severity", "summary", "description"] {
            assert!(value(lines, key).is_some_and(|v| !v.is_empty()), "{name}: no {key}");
        }
        let url = value(lines, "runbook_url").unwrap_or_else(|| panic!("{name}: no runbook_url"));
        let anchor = url.strip_prefix(RUNBOOK_BASE).unwrap_or_else(|| panic!("{name}: {url} is not under {RUNBOOK_BASE}"));
        assert_eq!(anchor, name.to_lowercase(), "{name}: {url}");
        assert!(anchors.iter().any(|a| a == anchor), "{name}: docs/monitoring.md has no section #{anchor}");
    }
}

/// The Grafana dashboard: valid JSON, variables for the jobq-dash instance and the database,
/// and every panel's every query on jobq's metrics, filtered by both.
#[test]
fn the_grafana_dashboard_is_json_with_panels() {
    let text = std::fs::read_to_string(deploy("grafana/jobq.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let variables: Vec<&str> = v["templating"]["list"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    for name in ["instance", "database", "queue"] {
        assert!(variables.contains(&name), "no variable {name}: {variables:?}");
    }
    let panels = v["panels"].as_array().unwrap();
    assert!(panels.len() >= 8, "{} panels", panels.len());
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("panel {} has no targets", p["title"]));
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("panel {}: a target without expr", p["title"]));
            // Each metric it reads: name{…instance=~"$instance",database=~"$database"…}.
            for (i, _) in expr.match_indices("jobq_") {
                let selector = expr[i..].split_once('{').map(|(name, rest)| (name, rest.split('}').next().unwrap()));
                let (name, labels) = selector.unwrap_or_else(|| panic!("panel {}: {expr}", p["title"]));
                assert!(
                    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && labels.contains("instance=~\"$instance\"")
                        && labels.contains("database=~\"$database\""),
                    "panel {}: {expr}",
                    p["title"]
                );
            }
            assert!(expr.contains("jobq_"), "panel {}: {expr}", p["title"]);
        }
    }
}
