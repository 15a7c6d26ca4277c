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
    /// From -f style patterns (a leading `^` excludes).
    pub fn new(args: &[String]) -> Filter {
        let patterns: Vec<(bool, String)> = args
            .iter()
            .map(|p| match p.strip_prefix('^') {
                Some(x) => (false, x.to_string()),
                None => (true, p.clone()),
            })
            .collect();
        Filter::from_patterns(patterns)
    }

    /// From (shown, glob) patterns in the order they are tried (-f, -I, -X).
    pub fn from_patterns(patterns: Vec<(bool, String)>) -> Filter {
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
