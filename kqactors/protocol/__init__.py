"""kqactors.protocol"""
