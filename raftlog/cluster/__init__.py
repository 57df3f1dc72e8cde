"""The cluster as a whole, as each node takes part in it: where new replicas go (placement),
replicas that move (reassignment), preferred leader elections (preferred_leaders), who leads
each partition (leadership), and the controller quorum as DescribeQuorum reports it
(controller_quorum)."""
