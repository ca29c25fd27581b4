"""The process and what surrounds it: the environment (``environ``, the one reader of
``os.environ``), files read and written safely (``files``), child processes under a deadline
(``procs``, ``reaper``) and the ranks of a distributed run (``ranks``)."""
