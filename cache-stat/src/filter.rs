//! Which counters to show: varnishstat's `-f` patterns.

use common::glob;

/// varnishstat's `-f` rules: patterns tried in order, the first match
/// decides (`^` excludes); unmatched counters are shown only when no
/// include pattern was given.
pub struct Filter {
    patterns: Vec<(bool, String)>,
    any_include: bool,
}

impl Filter {
    pub fn new(args: &[String]) -> Filter {
        let patterns: Vec<(bool, String)> = args
            .iter()
            .map(|p| match p.strip_prefix('^') {
                Some(x) => (false, x.to_string()),
                None => (true, p.clone()),
            })
            .collect();
        let any_include = patterns.iter().any(|(inc, _)| *inc);
        Filter { patterns, any_include }
    }
    pub fn shows(&self, name: &str) -> bool {
        for (inc, p) in &self.patterns {
            if glob::matches(p, name) {
                return *inc;
            }
        }
        !self.any_include
    }
}
