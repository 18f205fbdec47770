//! Expanding the patterns of changed rules into the hostnames the generator
//! recomputes ([`Touched::rule_hosts`](super::Touched)).

use std::collections::BTreeSet;

use super::ModelState;
use crate::model::Hostname;
use crate::rules::{RuleTouch, host_matches, is_wildcard};

impl ModelState {
    /// The hostnames a batch's rule changes (`t`) and service changes
    /// (`services`) affect through rules, in this state (the one after the
    /// batch). Empty, at no cost, when there are no rules.
    pub(crate) fn rule_hosts(
        &self,
        t: &RuleTouch,
        services: &BTreeSet<Hostname>,
    ) -> BTreeSet<Hostname> {
        let mut out = BTreeSet::new();
        if t.virtual_service.is_empty() && t.destination_rule.is_empty() && !self.rules.has_routes()
        {
            return out;
        }
        for p in &t.virtual_service {
            self.expand_pattern(p, &mut out);
        }
        let mut dests: BTreeSet<Hostname> = BTreeSet::new();
        for p in &t.destination_rule {
            self.expand_pattern(p, &mut dests);
        }
        out.extend(dests.iter().cloned());
        if self.rules.has_routes() {
            dests.extend(services.iter().cloned());
            for d in &dests {
                for p in self.rules.hosts_routing_to(d) {
                    self.expand_pattern(&p, &mut out);
                }
            }
        }
        out
    }

    /// `p` itself when exact; every service hostname it matches when a
    /// wildcard (O(services): wildcard rule edits are rare).
    fn expand_pattern(&self, p: &Hostname, out: &mut BTreeSet<Hostname>) {
        if is_wildcard(p.as_str()) {
            out.extend(
                self.services
                    .keys()
                    .filter(|h| host_matches(p.as_str(), h.as_str()))
                    .cloned(),
            );
        } else {
            out.insert(p.clone());
        }
    }
}
