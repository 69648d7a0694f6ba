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

/// Each figure of the health page is red exactly where its alert rule fires: the rule compares
/// the figure's metric with `> red`.
#[test]
fn each_alert_fires_at_the_health_pages_red_threshold() {
    let rules = std::fs::read_to_string(deploy("prometheus/jobq-alerts.yml")).unwrap();
    for c in ALL {
        let at = rules.find(&format!("- alert: {}\n", c.alert)).unwrap_or_else(|| panic!("no rule {}", c.alert));
        let expr = rules[at..].lines().find_map(|l| l.trim().strip_prefix("expr: ")).unwrap();
        assert!(expr.contains(c.metric) && expr.ends_with(&format!("> {}", c.red)), "{}: {expr} against {} > {}", c.alert, c.metric, c.red);
        // Dead rows count, there as on the health page, only in tables with many of them.
        if c.alert == DEAD_ROWS.alert {
            assert!(expr.starts_with(&format!("jobq_table_dead_rows > {DEAD_ROWS_MIN} and ")), "{expr}");
        }
    }
}

#[test]
fn the_grafana_dashboard_is_json_with_panels() {
    let text = std::fs::read_to_string(deploy("grafana/jobq.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let panels = v["panels"].as_array().unwrap();
    assert!(panels.len() >= 8, "{} panels", panels.len());
    for p in panels.iter().filter(|p| p["type"] != "row") {
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("panel {} has no targets", p["title"]));
        assert!(targets.iter().all(|t| t["expr"].as_str().is_some_and(|e| e.contains("jobq_"))), "panel {}", p["title"]);
    }
}
