//! Which nodes a warm goes to. Today every node holds every warm object and node 0 serves the
//! control plane's own reads; a fleet with rendezvous owners will warm each object on its
//! owners only. Purges and classifications are not placements: they go to every node, since
//! a stale copy anywhere would be served.

use crate::node::NodeClient;

/// Where warms go and which node reads for the control plane.
///
/// Contract: both methods are pure functions of their inputs (cheap, no I/O), so every
/// worker that asks about one object gets the same answer.
pub trait Placement: Send + Sync {
    /// The node whose cache serves the control plane's own reads (manifest lists, manifests,
    /// footers); `None` when there are no nodes.
    fn reader<'a>(&self, nodes: &'a [NodeClient]) -> Option<&'a NodeClient>;

    /// The nodes that should hold bytes of `bucket`/`key` warm.
    fn targets<'a>(&self, nodes: &'a [NodeClient], bucket: &str, key: &str) -> Vec<&'a NodeClient>;
}

/// Every node holds every warm object; the first node reads.
pub struct EveryNode;

impl Placement for EveryNode {
    fn reader<'a>(&self, nodes: &'a [NodeClient]) -> Option<&'a NodeClient> {
        nodes.first()
    }

    fn targets<'a>(
        &self,
        nodes: &'a [NodeClient],
        _bucket: &str,
        _key: &str,
    ) -> Vec<&'a NodeClient> {
        nodes.iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Node;

    #[test]
    fn every_node_warms_and_the_first_reads() {
        let nodes: Vec<NodeClient> = ["http://a:1", "http://b:1"]
            .into_iter()
            .map(|u| {
                NodeClient::new(Node {
                    admin: u.into(),
                    token: "t".into(),
                })
            })
            .collect();
        let p = EveryNode;
        assert_eq!(p.reader(&nodes).map(NodeClient::url), Some("http://a:1"));
        let t: Vec<&str> = p
            .targets(&nodes, "b", "k")
            .into_iter()
            .map(NodeClient::url)
            .collect();
        assert_eq!(t, ["http://a:1", "http://b:1"]);
        assert!(p.reader(&[]).is_none());
    }
}
