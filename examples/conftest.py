# The example suite runs against whatever machine pytest-gputopo learns: this host, or the one
# named with --gputopo-machine (the README's main job uses a bundled recorded machine).
