"""A relay process that SIGKILLs itself after its pipelined publish of batch
number ``KILL_AT`` and before that batch's write-back.

``python -m tests.faults.relay_worker URL EXCHANGE QUEUE BATCH_SIZE KILL_AT``,
under ``tests.faults.settings``.
"""

import os
import signal
import sys

import django


def main(url, exchange, queue, batch_size, kill_at):
    django.setup()
    from kombu import Exchange, Queue

    from outbox import relay
    from outbox.publishers import KombuPublisher

    class KilledAfterPublishing(KombuPublisher):
        batches = 0

        def publish_many(self, messages):
            refused = super().publish_many(messages)
            self.batches += 1
            if self.batches == kill_at:
                # The broker holds the batch; its rows are still only leased.
                os.kill(os.getpid(), signal.SIGKILL)
            return refused

    bound = Queue(queue, Exchange(exchange, type="topic"), routing_key="#")
    publisher = KilledAfterPublishing(url=url, exchange=exchange, declare=(bound,))
    relay.drain(batch_size=batch_size, publisher=publisher)


if __name__ == "__main__":
    url, exchange, queue, batch_size, kill_at = sys.argv[1:]
    main(url, exchange, queue, int(batch_size), int(kill_at))
