"""The operator's side: the commands of `responses-server` (keys, accounts, limits, status, gc) and
`responses-server dev`, everything on one machine.
"""
