"""The accounts of the ``grpc_acl_broker`` fixture (tests/compat/conftest.py), which the 5.x client
tests (Python, Node.js) sign their calls with: a writer with PUB|SUB on :data:`TOPIC`, a reader with
SUB only, and an admin (who creates the topic). Account names and secrets are (access key, secret key).
"""

TOPIC = "Grpc5AclTopic"
WRITER = ("Grpc5Writer", "writer-secret")
READER = ("Grpc5Reader", "reader-secret")
ADMIN = ("Grpc5Admin", "admin-secret")
