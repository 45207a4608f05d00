"""Transactional messages: half messages, their commit or rollback, and the broker's check-back.

As in RocketMQ 4.9.8 (``org.apache.rocketmq.broker.transaction``), all state lives in two
system topics and one consumer group's offsets, so a restarted broker rebuilds it from the store:

* ``bridge``          TransactionalMessageBridge: the on-disk forms (half, op, commit, put-back,
                      discard records) and the store I/O the service needs
* ``service``         TransactionalMessageServiceImpl: the check pass over the half queue
* ``check_listener``  Default/AbstractTransactionalMessageCheckListener: CHECK_TRANSACTION_STATE
                      to a producer of the group, and the discard after ``transactionCheckMax``
* ``check_service``   TransactionalMessageCheckService: the pass every ``transactionCheckInterval``
"""
