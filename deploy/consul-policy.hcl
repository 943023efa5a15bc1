# The minimal Consul ACL policy a Tabula cluster needs (#14). Give every
# Tabula process (master, tabletserver, worker, `tabula mr run
# --workers-consul`) a token holding this policy and nothing else, with
# --consul-token (or CONSUL_HTTP_TOKEN); the agent runs with
#   acl { enabled = true  default_policy = "deny" }
#
#   consul acl policy create -name tabula -rules @deploy/consul-policy.hcl
#   consul acl token create -description "tabula" -policy-name tabula
#
# What Tabula does in Consul (storage/coord's Consul implementation):
#   - keys under tabula/<cluster>/ : reads, blocking watches (list), writes,
#     check-and-set, deletes, and transactions of those with lock/unlock
#     (the master lock, servers/, workers/, the root tablet's location, the
#     schema and the catalog) — key write covers them all;
#   - sessions (TTL sessions without health checks) to hold locks: create,
#     renew, read, destroy — session write on the node of the agent the
#     process talks to.
# Nothing else: no services, no catalog, no agent endpoints.

# One cluster per token: narrow this to "tabula/<cluster>/" (the --cluster
# flag; "tabula/default/" by default) to keep clusters sharing an agent
# apart.
key_prefix "tabula/" {
  policy = "write"
}

# Sessions are created against the agent's node; "" matches any node name,
# as the processes may talk to any agent. Narrow it to the agents' node
# names if they are known.
session_prefix "" {
  policy = "write"
}
