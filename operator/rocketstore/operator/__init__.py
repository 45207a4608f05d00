"""The RocketStore Kubernetes operator (kopf).

Modules, from pure to effectful:

``model``      the ``RocketStore`` spec parsed into frozen dataclasses (:class:`model.Spec`)
``sizing``     the per-broker volume size formula
``desired``    pure builders: spec -> StatefulSet, Services, ConfigMap, PDB, ServiceAccount
``conditions`` status conditions (Ready, Progressing, Degraded, DiskPressure)
``retention``  the adaptive retention policy (a pure decision function)
``kube``       the operator's API calls through the official client (server-side apply, get, patch, delete)
``brokers``    the one seam that talks to brokers (BrokerAdmin over RocketMQ remoting)
``reconcile``  the async reconciliation steps that call the two above
``pause``      the pause-reconciliation annotation and its condition
``upgrade``    which stores roll to a new default broker image now (a pure decision)
``leader``     leader election over a coordination.k8s.io Lease (``--leader-elect``)
``uninstall``  the chart's pre-delete hook: stop the operator, release the RocketStores' finalizer
``handlers``   thin kopf handlers
``metrics``    Prometheus counters
``main``       ``rocketstore operator``: settings and ``kopf.run``
"""

GROUP = "rocketstore.io"
VERSION = "v1alpha1"
PLURAL = "rocketstores"
KIND = "RocketStore"
FIELD_MANAGER = "rocketstore-operator"
#: kopf's finalizer on every RocketStore (``settings.persistence.finalizer``; :mod:`handlers`, :mod:`uninstall`)
FINALIZER = f"{GROUP}/operator"
