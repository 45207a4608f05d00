"""Request processors, one module per family of request codes.

Every processor has one shape (:class:`rocketstore.broker.broker_context.RequestProcessor`): a
class built from the :class:`~rocketstore.broker.broker_context.BrokerContext` it needs, whose
``handlers()`` maps request codes to handlers; ``BrokerController.register_processors`` builds
them and registers those handlers. Processors never import the controller's module.
"""
