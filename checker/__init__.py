"""The trusted checker of Max-of-K accuracy certificates.

Imports only the Python standard library, mpmath and lark.  Never searches;
fails closed (exit 0 only on full acceptance).  See spec/ for the contract.
"""
