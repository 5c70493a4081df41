"""Imported first by the fork server that fork_group's workers come from
(launch.FORK_SERVER_PRELOAD): the server then answers SIGUSR1 with its
Python stacks, into the build's stacks folder, and is marked there for the
kernel watchdog (mlbook.common.stacks). Importing it anywhere else does the
same to that process."""

from mlbook.common import stacks

stacks.on_request("forkserver")
