"""kqactors.actors"""
