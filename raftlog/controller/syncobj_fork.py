# raftlog: pysyncobj 0.3.17's syncobj.py, forked. Upstream's size and shape on purpose, so that
# `diff` against upstream shows only the changes raftlog/raft/FORK.md lists and explains.
import time
import random
import os
import sys
import threading
import weakref
import collections
import functools
import struct
import logging
import copy
import types
try:
    import Queue
    is_py3 = False

    def iteritems(v):
        return v.iteritems()
except ImportError:  # python3
    import queue as Queue
    is_py3 = True
    xrange = range

    def iteritems(v):
        return v.items()

import pysyncobj.pickle as pickle

from pysyncobj.dns_resolver import globalDnsResolver
from pysyncobj.poller import createPoller

try:
    from pysyncobj.pipe_notifier import PipeNotifier
    PIPE_NOTIFIER_ENABLED = True
except ImportError:
    PIPE_NOTIFIER_ENABLED = False

from pysyncobj.serializer import Serializer, SERIALIZER_STATE
from pysyncobj.node import Node, TCPNode
from pysyncobj.transport import Transport, TCPTransport, TransportNotReadyError
from pysyncobj.journal import createJournal
from pysyncobj.config import SyncObjConf, FAIL_REASON
from pysyncobj.encryptor import HAS_CRYPTO, getEncryptor
from pysyncobj.version import VERSION
from pysyncobj.fast_queue import FastQueue
from pysyncobj.monotonic import monotonic as monotonicTime

logger = logging.getLogger(__name__)


class _RAFT_STATE:
    FOLLOWER = 0
    CANDIDATE = 1
    LEADER = 2

class _COMMAND_TYPE:
    REGULAR = 0
    NO_OP = 1
    MEMBERSHIP = 2
    VERSION = 3

_bchr = functools.partial(struct.pack, 'B')


class SyncObjException(Exception):
    def __init__(self, errorCode, *args, **kwargs):
        Exception.__init__(self, errorCode, *args, **kwargs)
        self.errorCode = errorCode

class SyncObjExceptionWrongVer(SyncObjException):
    def __init__(self, ver):
        SyncObjException.__init__(self, 'wrongVer')
        self.ver = ver

class SyncObjConsumer(object):
    def __init__(self):
        self._syncObj = None
        self.__properies = set()
        for key in self.__dict__:
            self.__properies.add(key)

    def _destroy(self):
        self._syncObj = None

    def _serialize(self):
        return dict([(k, v) for k, v in iteritems(self.__dict__) if k not in self.__properies])

    def _deserialize(self, data):
        for k, v in iteritems(data):
            self.__dict__[k] = v


# https://github.com/bakwc/PySyncObj

class SyncObj(object):
    # raftlog (FORK.md, 6): whether commands proposed on a follower go to the leader.
    forwardCommands = True
    # raftlog (FORK.md, 9): seconds a leader stays caught up before its group goes quiet
    # (None: never), and when a node's process was last heard from (None: not connected).
    quiesceAfter = None
    peerContact = staticmethod(lambda node: None)
    # raftlog (FORK.md, 9): whether this node may start another election now.
    electionAllowed = staticmethod(lambda: True)
    # raftlog (FORK.md, 9): the settings above are set on an instance after __init__, where
    # the dump would take them for state; a lambda there made every snapshot fail.
    _SETTINGS = frozenset(('forwardCommands', 'quiesceAfter', 'peerContact', 'electionAllowed'))
    def __init__(self, selfNode, otherNodes, conf=None, consumers=None, nodeClass = TCPNode, transport = None, transportClass = TCPTransport, voter = True):
        """
        Main SyncObj class, you should inherit your own class from it.

        :param selfNode: object representing the self-node or address of the current node server 'host:port'
        :type selfNode: Node or str
        :param otherNodes: objects representing the other nodes or addresses of partner nodes ['host1:port1', 'host2:port2', ...]
        :type otherNodes: iterable of Node or iterable of str
        :param conf: configuration object
        :type conf: SyncObjConf
        :param consumers: objects to be replicated
        :type consumers: list of SyncObjConsumer inherited objects
        :param nodeClass: class used for representation of nodes
        :type nodeClass: class
        :param transport: transport object; if None, transportClass is used to initialise such an object
        :type transport: Transport or None
        :param transportClass: the Transport subclass to be used for transferring messages to and from other nodes
        :type transportClass: class
        :param voter: raftlog (FORK.md, 12): whether selfNode is one of the voters (else an
            observer: it gets and applies the log, forwards its commands, never votes)
        :type voter: bool
        """

        if conf is None:
            self.__conf = SyncObjConf()
        else:
            self.__conf = conf

        self.__conf.validate()

        if self.__conf.password is not None:
            if not HAS_CRYPTO:
                raise ImportError("Please install 'cryptography' module")
            self.__encryptor = getEncryptor(self.__conf.password)
        else:
            self.__encryptor = None

        consumers = consumers or []
        newConsumers = []
        for c in consumers:
            if not isinstance(c, SyncObjConsumer) and getattr(c, '_consumer', None):
                c = c._consumer()
            if not isinstance(c, SyncObjConsumer):
                raise SyncObjException('Consumers must be inherited from SyncObjConsumer')
            newConsumers.append(c)
        consumers = newConsumers

        self.__consumers = consumers

        origSelfNode = selfNode
        if not isinstance(selfNode, Node) and selfNode is not None:
            selfNode = nodeClass(selfNode)
        self.__selfNode = selfNode
        self.__otherNodes = set() # set of Node
        for otherNode in otherNodes:
            if otherNode == origSelfNode:
                continue
            if not isinstance(otherNode, Node):
                otherNode = nodeClass(otherNode)
            self.__otherNodes.add(otherNode)
        self.__readonlyNodes = set() # set of Node
        # raftlog (FORK.md, 12): the voters are __otherNodes, and this node if __selfVoter;
        # every other connected node is an observer (__readonlyNodes). Votes and pre-votes are
        # counted by who sent them, and only from voters.
        self.__selfVoter = bool(voter)
        self.__votesFrom = set()
        self.__preVotesFrom = set()
        self.__connectedNodes = set() # set of Node
        self.__nodeClass = nodeClass

        self.__raftState = _RAFT_STATE.FOLLOWER
        self.__raftCurrentTerm = 0
        self.__votedForNodeId = None
        self.__votesCount = 0
        self.__raftLeader = None
        self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()
        # Set while a leadership transfer (Raft 'TimeoutNow') is pending, to stop
        # the outgoing leader's heartbeats from postponing the forced election.
        self.__transferInProgress = False
        self.__transferAskedUntil = 0.0
        # raftlog: PreVote and leader stickiness (FORK.md, 3). The term a pre-vote is asking
        # for, the pre-votes it got, and when this node last heard from a live leader.
        self.__preVoteTerm = None
        self.__preVotesCount = 0
        self.__lastLeaderContact = None
        # raftlog (FORK.md, 9): a quiet group runs no timers; when its leader became idle.
        self.__quiesced = False
        self.__idleSince = None
        self.__raftLog = createJournal(self.__conf.journalFile)
        if len(self.__raftLog) == 0:
            self.__raftLog.add(_bchr(_COMMAND_TYPE.NO_OP), 1, self.__raftCurrentTerm)
        # Restore raft persistent state (see raft paper §5 - currentTerm and votedFor
        # must survive restarts, otherwise already-committed entries may be overwritten
        # by a stale member after a simultaneous restart of the cluster). The max() with
        # the last log term covers journals written by versions that did not store the
        # term: currentTerm is always >= the term of the last log entry.
        self.__raftCurrentTerm = max(self.__raftLog.getCurrentTerm(), self.__getCurrentLogTerm())
        self.__votedForNodeId = self.__raftLog.getVotedForNodeId()
        self.__raftCommitIndex = self.__raftLog.getRaftCommitIndex()
        self.__raftLastApplied = 1
        self.__raftNextIndex = {}
        self.__lastResponseTime = {}
        self.__raftMatchIndex = {}
        self.__lastSerializedTime = monotonicTime()
        self.__lastSerializedEntry = None
        self.__forceLogCompaction = False
        self.__leaderCommitIndex = None
        self.__onReadyCalled = False
        self.__changeClusterIDx = None
        self.__noopIDx = None
        self.__destroying = False
        self.__recvTransmission = ''

        self.__onTickCallbacks = []
        self.__onTickCallbacksLock = threading.Lock()

        self.__startTime = monotonicTime()
        self.__numOneSecondDumps = 0
        globalDnsResolver().setTimeouts(self.__conf.dnsCacheTime, self.__conf.dnsFailCacheTime)
        globalDnsResolver().setPreferredAddrFamily(self.__conf.preferredAddrType)
        self.__serializer = Serializer(self.__conf.fullDumpFile,
                                       self.__conf.logCompactionBatchSize,
                                       self.__conf.useFork,
                                       self.__conf.serializer,
                                       self.__conf.deserializer,
                                       self.__conf.serializeChecker)
        self.__lastInitTryTime = 0
        self._poller = createPoller(self.__conf.pollerType)

        if transport is not None:
            self.__transport = transport
        else:
            self.__transport = transportClass(self, self.__selfNode, self.__otherNodes)
        self.__transport.setOnNodeConnectedCallback(self.__onNodeConnected)
        self.__transport.setOnNodeDisconnectedCallback(self.__onNodeDisconnected)
        self.__transport.setOnMessageReceivedCallback(self.__onMessageReceived)
        self.__transport.setOnReadonlyNodeConnectedCallback(self.__onReadonlyNodeConnected)
        self.__transport.setOnReadonlyNodeDisconnectedCallback(self.__onReadonlyNodeDisconnected)
        self.__transport.setOnUtilityMessageCallback('status', self._getStatus)
        self.__transport.setOnUtilityMessageCallback('add', self._addNodeToCluster)
        self.__transport.setOnUtilityMessageCallback('remove', self._removeNodeFromCluster)
        self.__transport.setOnUtilityMessageCallback('set_version', self._setCodeVersion)
        self.__transport.setOnUtilityMessageCallback('transfer', self._transferLeadership)

        self._methodToID = {}
        self._idToMethod = {}
        self._idToConsumer = {}

        methods = [m for m in dir(self) if callable(getattr(self, m)) and \
                   getattr(getattr(self, m), 'replicated', False) and \
                   m != getattr(getattr(self, m), 'origName')]
        currMethodID = 0
        self.__selfCodeVersion = 0
        self.__currentVersionFuncNames = {}

        methodsToEnumerate = []

        for method in methods:
            ver = getattr(getattr(self, method), 'ver')
            methodsToEnumerate.append((ver, 0, method, self))

        for consumerNum, consumer in enumerate(consumers):
            consumerMethods = [m for m in dir(consumer) if callable(getattr(consumer, m)) and\
                               getattr(getattr(consumer, m), 'replicated', False) and \
                               m != getattr(getattr(consumer, m), 'origName')]
            for method in consumerMethods:
                ver = getattr(getattr(consumer, method), 'ver')
                methodsToEnumerate.append((ver, consumerNum + 1, method, consumer))
            consumer._syncObj = self

        for ver, _, method, obj in sorted(methodsToEnumerate):
            self.__selfCodeVersion = max(self.__selfCodeVersion, ver)
            if obj is self:
                self._methodToID[method] = currMethodID
            else:
                self._methodToID[(id(obj), method)] = currMethodID
            self._idToMethod[currMethodID] = getattr(obj, method)
            currMethodID += 1

        self.__onSetCodeVersion(0)

        self.__thread = None
        self.__mainThread = None
        self.__initialised = None
        self.__commandsQueue = FastQueue(self.__conf.commandsQueueSize)
        if not self.__conf.appendEntriesUseBatch and PIPE_NOTIFIER_ENABLED:
            self.__pipeNotifier = PipeNotifier(self._poller)
        self.__needLoadDumpFile = True

        self.__lastReadonlyCheck = 0
        self.__newAppendEntriesTime = 0

        self.__commandsWaitingCommit = collections.defaultdict(list)  # logID => [(termID, callback), ...]
        self.__commandsLocalCounter = 0
        self.__commandsWaitingReply = {}  # commandLocalCounter => callback

        self.__properies = set()
        for key in self.__dict__:
            self.__properies.add(key)

        self.__enabledCodeVersion = 0

        if self.__conf.autoTick:
            self.__mainThread = threading.current_thread()
            self.__initialised = threading.Event()
            self.__thread = threading.Thread(target=SyncObj._autoTickThread, args=(weakref.proxy(self),))
            self.__thread.start()
            self.__initialised.wait()
            # while not self.__initialised.is_set():
            #     pass
        else:
            try:
                while not self.__transport.ready:
                    self.__transport.tryGetReady()
            except TransportNotReadyError:
                logger.exception('failed to perform initialization')
                raise SyncObjException('BindError') # Backwards compatibility

    def destroy(self):
        """
        Correctly destroy SyncObj. Stop autoTickThread, close connections, etc.
        """
        if self.__conf.autoTick:
            self.__destroying = True
        else:
            self._doDestroy()

    def tick_thread_alive(self):
        """
        Check if the tick thread is alive.
        """
        if self.__thread and self.__thread.is_alive():
            return True
        return False

    def destroy_synchronous(self):
        """
        Correctly destroy SyncObj. Stop autoTickThread, close connections, etc. and ensure the threads are gone.
        """
        self.destroy()
        self.__thread.join()

    def waitReady(self):
        """
        Waits until the transport is ready for operation.

        :raises TransportNotReadyError: if the transport fails to get ready
        """
        self.__transport.waitReady()

    def waitBinded(self):
        """
        Waits until initialized (binded port).
        If success - just returns.
        If failed to initialized after conf.maxBindRetries - raise SyncObjException.
        """
        try:
            self.__transport.waitReady()
        except TransportNotReadyError:
            raise SyncObjException('BindError')
        if not self.__transport.ready:
            raise SyncObjException('BindError')

    def _destroy(self):
        self.destroy()

    def _doDestroy(self):
        self.__transport.destroy()
        for consumer in self.__consumers:
            consumer._destroy()
        self.__raftLog._destroy()

    def getCodeVersion(self):
        return self.__enabledCodeVersion

    def setCodeVersion(self, newVersion, callback = None):
        """Switch to a new code version on all cluster nodes. You
        should ensure that cluster nodes are updated, otherwise they
        won't be able to apply commands.

        :param newVersion: new code version
        :type int
        :param callback: will be called on success or fail
        :type callback: function(`FAIL_REASON <#pysyncobj.FAIL_REASON>`_, None)
        """
        assert isinstance(newVersion, int)
        if newVersion > self.__selfCodeVersion:
            raise Exception('wrong version, current version is %d, requested version is %d' % (self.__selfCodeVersion, newVersion))
        if newVersion < self.__enabledCodeVersion:
            raise Exception('wrong version, enabled version is %d, requested version is %d' % (self.__enabledCodeVersion, newVersion))
        self._applyCommand(pickle.dumps(newVersion), callback, _COMMAND_TYPE.VERSION)

    def addNodeToCluster(self, node, callback = None, atMost = None):
        """Add single node to cluster (dynamic membership changes). Async.
        You should wait until node successfully added before adding
        next node.

        :param node: node object or 'nodeHost:nodePort'
        :type node: Node | str
        :param callback: will be called on success or fail
        :type callback: function(`FAIL_REASON <#pysyncobj.FAIL_REASON>`_, None)
        :param atMost: raftlog (FORK.md, 13): the leader refuses the change unless the voters,
            as its log has them when it appends, are fewer than this
        """
        if not self.__conf.dynamicMembershipChange:
            raise Exception('dynamicMembershipChange is disabled')
        if not isinstance(node, Node):
            node = self.__nodeClass(node)
        request = ['add', node.id, node] + ([atMost] if atMost is not None else [])
        self._applyCommand(pickle.dumps(request), callback, _COMMAND_TYPE.MEMBERSHIP)

    def removeNodeFromCluster(self, node, callback = None):
        """Remove single node from cluster (dynamic membership changes). Async.
        You should wait until node successfully added before adding
        next node.

        :param node: node object or 'nodeHost:nodePort'
        :type node: Node | str
        :param callback: will be called on success or fail
        :type callback: function(`FAIL_REASON <#pysyncobj.FAIL_REASON>`_, None)
        """
        if not self.__conf.dynamicMembershipChange:
            raise Exception('dynamicMembershipChange is disabled')
        if not isinstance(node, Node):
            node = self.__nodeClass(node)
        self._applyCommand(pickle.dumps(['rem', node.id, node]), callback, _COMMAND_TYPE.MEMBERSHIP)

    def _setCodeVersion(self, args, callback):
        self.setCodeVersion(args[0], callback)

    def _addNodeToCluster(self, args, callback):
        self.addNodeToCluster(args[0], callback)

    def _removeNodeFromCluster(self, args, callback):
        node = args[0]
        if node == self.__selfNode.address:
            callback(None, FAIL_REASON.REQUEST_DENIED)
        else:
            self.removeNodeFromCluster(node, callback)

    def transferLeadership(self, node=None, callback=None):
        """Gracefully transfer raft leadership to another node (Raft 'TimeoutNow').

        Must be called on the current leader. The target node must be fully
        caught up (matchIndex == leader's last log index), otherwise the
        request is denied. If node is None, the most caught-up connected
        follower is selected automatically. Async and best-effort: a
        successful callback only means the request was sent; poll
        getStatus()['leader'] to confirm the transfer completed.

        :param node: target node object or 'nodeHost:nodePort' (None = auto)
        :type node: Node | str | None
        :param callback: will be called on success or fail
        :type callback: function(`FAIL_REASON <#pysyncobj.FAIL_REASON>`_, None)
        """
        if self.__raftState != _RAFT_STATE.LEADER:
            self.__callErrCallback(FAIL_REASON.NOT_LEADER, callback)
            return
        if node is not None and not isinstance(node, Node):
            node = self.__nodeClass(node)
        if node is None:
            candidates = [(self.__raftMatchIndex.get(n, 0), n.id, n)
                          for n in self.__otherNodes if n in self.__connectedNodes]
            if not candidates:
                self.__callErrCallback(FAIL_REASON.REQUEST_DENIED, callback)
                return
            node = max(candidates)[2]
        if node == self.__selfNode or node not in self.__otherNodes:
            self.__callErrCallback(FAIL_REASON.REQUEST_DENIED, callback)
            return
        if self.__raftMatchIndex.get(node, 0) != self.__getCurrentLogIndex():
            # target is not fully synced - transferring would fail the election
            self.__callErrCallback(FAIL_REASON.REQUEST_DENIED, callback)
            return
        self.__transport.send(node, {
            'type': 'timeout_now',
            'term': self.__raftCurrentTerm,
        })
        # raftlog (FORK.md, 9): a quiesce heartbeat sent after the TimeoutNow would stop the
        # target's timers before it stands; the leader stays awake while the transfer runs.
        self.__transferAskedUntil = monotonicTime() + self.__conf.raftMaxTimeout
        if callback is not None:
            callback(None, FAIL_REASON.SUCCESS)

    def _transferLeadership(self, args, callback):
        self.transferLeadership(args[0] if args and args[0] else None, callback)

    def __onSetCodeVersion(self, newVersion):
        methods = [m for m in dir(self) if callable(getattr(self, m)) and\
                   getattr(getattr(self, m), 'replicated', False) and \
                   m != getattr(getattr(self, m), 'origName')]

        self.__currentVersionFuncNames = {}

        funcVersions = collections.defaultdict(set)
        for method in methods:
            ver = getattr(getattr(self, method), 'ver')
            origFuncName = getattr(getattr(self, method), 'origName')
            funcVersions[origFuncName].add(ver)

        for consumer in self.__consumers:
            consumerID = id(consumer)
            consumerMethods = [m for m in dir(consumer) if callable(getattr(consumer, m)) and \
                               getattr(getattr(consumer, m), 'replicated', False)]
            for method in consumerMethods:
                ver = getattr(getattr(consumer, method), 'ver')
                origFuncName = getattr(getattr(consumer, method), 'origName')
                funcVersions[(consumerID, origFuncName)].add(ver)

        for funcName, versions in iteritems(funcVersions):
            versions = sorted(list(versions))
            for v in versions:
                if v > newVersion:
                    break
                realFuncName = funcName[1] if isinstance(funcName, tuple) else funcName
                self.__currentVersionFuncNames[funcName] = realFuncName + '_v' + str(v)

    def _getFuncName(self, funcName):
        return self.__currentVersionFuncNames[funcName]

    def _applyCommand(self, command, callback, commandType = None):
        self.unquiesce()  # raftlog (FORK.md, 9): a command wakes a quiet group
        try:
            if commandType is None:
                self.__commandsQueue.put_nowait((command, callback))
            else:
                self.__commandsQueue.put_nowait((_bchr(commandType) + command, callback))
            if not self.__conf.appendEntriesUseBatch and PIPE_NOTIFIER_ENABLED:
                self.__pipeNotifier.notify()
        except Queue.Full:
            self.__callErrCallback(FAIL_REASON.QUEUE_FULL, callback)

    def _checkCommandsToApply(self):
        startTime = monotonicTime()

        while monotonicTime() - startTime < self.__conf.appendEntriesPeriod:
            if self.__raftLeader is None and self.__conf.commandsWaitLeader:
                break
            try:
                command, callback = self.__commandsQueue.get_nowait()
            except Queue.Empty:
                break

            requestNode, requestID = None, None
            if isinstance(callback, tuple):
                requestNode, requestID = callback

            if self.__raftState == _RAFT_STATE.LEADER:
                idx, term = self.__getCurrentLogIndex() + 1, self.__raftCurrentTerm

                if self.__conf.dynamicMembershipChange:
                    changeClusterRequest = self.__parseChangeClusterRequest(command)
                else:
                    changeClusterRequest = None
                accepted = True
                if changeClusterRequest is not None:
                    # raftlog (FORK.md, 12): the entry names the whole configuration after
                    # it and before it, as this leader sees them.
                    changeClusterRequest = self.__absoluteChange(changeClusterRequest)
                    accepted = changeClusterRequest is not None and \
                        self.__changeCluster(changeClusterRequest)
                    if accepted:
                        command = _bchr(_COMMAND_TYPE.MEMBERSHIP) + pickle.dumps(changeClusterRequest)
                        # (upstream never set it: a second change could follow an
                        # uncommitted one, and two majorities need not meet)
                        self.__changeClusterIDx = idx

                if accepted:

                    self.__raftLog.add(command, idx, term)

                    if requestNode is None:
                        if callback is not None:
                            self.__commandsWaitingCommit[idx].append((term, callback))
                    else:
                        self.__transport.send(requestNode, {
                            'type': 'apply_command_response',
                            'request_id': requestID,
                            'log_idx': idx,
                            'log_term': term,
                        })
                    if not self.__conf.appendEntriesUseBatch:
                        self.__sendAppendEntries()
                else:

                    if requestNode is None:
                        if callback is not None:
                            callback(None, FAIL_REASON.REQUEST_DENIED)
                    else:
                        self.__transport.send(requestNode, {
                            'type': 'apply_command_response',
                            'request_id': requestID,
                            'error': FAIL_REASON.REQUEST_DENIED,
                        })

            elif self.__raftLeader is not None and not self.forwardCommands:
                # raftlog (FORK.md, 6): the caller judged this command as leader; another
                # leader would append it unjudged.
                self.__callErrCallback(FAIL_REASON.NOT_LEADER, callback)
            elif self.__raftLeader is not None:
                if requestNode is None:
                    message = {
                        'type': 'apply_command',
                        'command': command,
                    }

                    if callback is not None:
                        self.__commandsLocalCounter += 1
                        self.__commandsWaitingReply[self.__commandsLocalCounter] = callback
                        message['request_id'] = self.__commandsLocalCounter

                    self.__transport.send(self.__raftLeader, message)
                else:
                    self.__transport.send(requestNode, {
                        'type': 'apply_command_response',
                        'request_id': requestID,
                        'error': FAIL_REASON.NOT_LEADER,
                    })
            else:
                self.__callErrCallback(FAIL_REASON.MISSING_LEADER, callback)

    def _autoTickThread(self):
        try:
            self.__transport.tryGetReady()
        except TransportNotReadyError:
            logger.exception('failed to perform initialization')
            return
        finally:
            self.__initialised.set()
        time.sleep(0.1)
        try:
            while True:
                if not self.__mainThread.is_alive():
                    break
                if self.__destroying:
                    self._doDestroy()
                    break
                try:
                    self._onTick(self.__conf.autoTickPeriod)
                except Exception:
                    # log, wait a little and retry
                    logger.exception('failed _onTick in _autoTickThread')
                    time.sleep(self.__conf.autoTickPeriod)
        except ReferenceError:
            pass

    def doTick(self, timeToWait=0.0):
        """Performs single tick. Should be called manually if `autoTick <#pysyncobj.SyncObjConf.autoTick>`_ disabled

        :param timeToWait: max time to wait for next tick. If zero - perform single tick without waiting for new events.
            Otherwise - wait for new socket event and return.
        :type timeToWait: float
        """
        assert not self.__conf.autoTick
        self._onTick(timeToWait)

    def _onTick(self, timeToWait=0.0):
        if not self.__transport.ready:
            try:
                self.__transport.tryGetReady()
            except TransportNotReadyError:
                # Implicitly handled in the 'if not self.__transport.ready' below
                pass

        if not self.__transport.ready:
            time.sleep(timeToWait)
            self.__applyLogEntries()
            return

        if self.__needLoadDumpFile:
            if self.__conf.fullDumpFile is not None and os.path.isfile(self.__conf.fullDumpFile):
                self.__loadDumpFile(clearJournal=False)
            self.__needLoadDumpFile = False
            if self.__conf.dynamicMembershipChange:
                # raftlog (FORK.md, 12): the configuration is the latest one in the log, from
                # when it is appended: every change past the dump counts now, not once applied.
                for entry in self.__getEntries(self.__raftLastApplied + 1):
                    request = self.__parseChangeClusterRequest(entry[0])
                    if request is not None:
                        self.__doChangeCluster(request)

        workTime = monotonicTime() - self.__startTime
        if workTime > self.__numOneSecondDumps:
            self.__numOneSecondDumps += 1
            self.__raftLog.onOneSecondTimer()

        if self.__raftState in (_RAFT_STATE.FOLLOWER, _RAFT_STATE.CANDIDATE) and self.__selfNode is not None \
                and not self.__quiesced:
            if self.__raftElectionDeadline < monotonicTime() and self.__connectedToAnyone():
                self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()
                transfer = self.__transferInProgress
                self.__transferInProgress = False
                if not self.__selfVoter:
                    pass  # raftlog (FORK.md, 12): an observer never stands (its timer runs on)
                elif transfer or not self.__otherNodes:
                    self.__startElection(transfer)
                elif self.electionAllowed():
                    # raftlog (FORK.md, 9): else the node is electing many groups at once, and
                    # this one waits another (random) election timeout rather than slow
                    # every election down.
                    self.__startPreVote()

        if self.__raftState == _RAFT_STATE.LEADER and not self.__quiesced:

            commitIdx = self.__raftCommitIndex
            nextCommitIdx = self.__raftCommitIndex

            while commitIdx < self.__getCurrentLogIndex():
                commitIdx += 1
                count = 1
                for node in self.__otherNodes:
                    if self.__raftMatchIndex[node] >= commitIdx:
                        count += 1
                if count <= (len(self.__otherNodes) + 1) / 2:
                    break
                entries = self.__getEntries(commitIdx, 1)
                if not entries:
                    continue
                commitTerm = entries[0][2]
                if commitTerm != self.__raftCurrentTerm:
                    continue
                nextCommitIdx = commitIdx

            if self.__raftCommitIndex != nextCommitIdx:
                self.__raftCommitIndex = nextCommitIdx
                self.__raftLog.setRaftCommitIndex(self.__raftCommitIndex)

            self.__leaderCommitIndex = self.__raftCommitIndex
            deadline = monotonicTime() - self.__conf.leaderFallbackTimeout
            count = 1
            for node in self.__otherNodes:
                # raftlog (FORK.md, 10): a follower whose node is heard counts as answering;
                # its group's answers may be waiting behind its other groups' work.
                heard = self.peerContact(node)
                if self.__lastResponseTime[node] > deadline or (heard is not None and heard > deadline):
                    count += 1
            if count <= (len(self.__otherNodes) + 1) / 2:
                self.__setState(_RAFT_STATE.FOLLOWER)
                self.__raftLeader = None

        needSendAppendEntries = self.__applyLogEntries()

        if self.__raftState == _RAFT_STATE.LEADER and not self.__quiesced:
            if monotonicTime() > self.__newAppendEntriesTime or needSendAppendEntries:
                self.__sendAppendEntries()

        if not self.__onReadyCalled and self.__raftLastApplied == self.__leaderCommitIndex:
            if self.__conf.onReady:
                self.__conf.onReady()
            self.__onReadyCalled = True

        self._checkCommandsToApply()
        self.__tryLogCompaction()
        if self.quiesceAfter is not None:
            self.__tryQuiesce()

        with self.__onTickCallbacksLock:
            for callback in self.__onTickCallbacks:
                callback()

        self._poller.poll(timeToWait)

    def __applyLogEntries(self):
        needSendAppendEntries = False

        if self.__raftCommitIndex > self.__raftLastApplied:
            count = self.__raftCommitIndex - self.__raftLastApplied
            entries = self.__getEntries(self.__raftLastApplied + 1, count)
            for entry in entries:
                try:
                    currentTermID = entry[2]
                    subscribers = self.__commandsWaitingCommit.pop(entry[1], [])
                    res = self.__doApplyCommand(entry[0])
                    for subscribeTermID, callback in subscribers:
                        if subscribeTermID == currentTermID:
                            callback(res, FAIL_REASON.SUCCESS)
                        else:
                            callback(None, FAIL_REASON.DISCARDED)

                    self.__raftLastApplied += 1
                except SyncObjExceptionWrongVer as e:
                    logger.error(
                        'request to switch to unsupported code version (self version: %d, requested version: %d)' %
                        (self.__selfCodeVersion, e.ver))

            if not self.__conf.appendEntriesUseBatch:
                needSendAppendEntries = True

        return needSendAppendEntries

    def addOnTickCallback(self, callback):
        with self.__onTickCallbacksLock:
            self.__onTickCallbacks.append(callback)

    def removeOnTickCallback(self, callback):
        with self.__onTickCallbacksLock:
            try:
                self.__onTickCallbacks.remove(callback)
            except ValueError:
                # callback not in list, ignore
                pass

    def isNodeConnected(self, node):
        """
        Checks if the given node is connected
        :param node: node to check
        :type node: Node
        :rtype: bool
        """
        return node in self.__connectedNodes

    @property
    def selfNode(self):
        """
        :rtype: Node
        """
        return self.__selfNode

    @property
    def otherNodes(self):
        """
        :rtype: set of Node
        """
        return self.__otherNodes.copy()

    @property
    def readonlyNodes(self):
        """
        :rtype: set of Node
        """
        return self.__readonlyNodes.copy()

    @property
    def raftLastApplied(self):
        """
        :rtype: int
        """
        return self.__raftLastApplied

    @property
    def raftCommitIndex(self):
        """
        :rtype: int
        """
        return self.__raftCommitIndex

    @property
    def raftCurrentTerm(self):
        """
        :rtype: int
        """
        return self.__raftCurrentTerm

    @property
    def hasQuorum(self):
        '''
        Does the cluster have a quorum according to this node

        :rtype: bool
        '''

        nodes = self.__otherNodes
        node_count = len(nodes)
        # Get number of connected nodes that participate in cluster quorum
        connected_count = len(nodes.intersection(self.__connectedNodes))

        if self.__selfNode is not None and self.__selfVoter:
            # This node participates in cluster quorum
            connected_count += 1
            node_count += 1

        return connected_count > node_count / 2

    def getStatus(self):
        """Dumps different debug info about cluster to dict and return it"""

        status = {}
        status['version'] = VERSION
        status['revision'] = 'deprecated'
        status['self'] = self.selfNode
        status['state'] = self.__raftState
        status['leader'] = self.__raftLeader
        status['has_quorum'] = self.hasQuorum
        status['partner_nodes_count'] = len(self.__otherNodes)
        for node in self.__otherNodes:
            status['partner_node_status_server_' + node.id] = 2 if self.isNodeConnected(node) else 0
        status['readonly_nodes_count'] = len(self.__readonlyNodes)
        for node in self.__readonlyNodes:
            status['readonly_node_status_server_' + node.id] = 2 if self.isNodeConnected(node) else 0
        status['log_len'] = len(self.__raftLog)
        status['last_applied'] = self.raftLastApplied
        status['commit_idx'] = self.raftCommitIndex
        status['raft_term'] = self.raftCurrentTerm
        status['next_node_idx_count'] = len(self.__raftNextIndex)
        for node, idx in iteritems(self.__raftNextIndex):
            status['next_node_idx_server_' + node.id] = idx
        status['match_idx_count'] = len(self.__raftMatchIndex)
        for node, idx in iteritems(self.__raftMatchIndex):
            status['match_idx_server_' + node.id] = idx
        status['leader_commit_idx'] = self.__leaderCommitIndex
        status['uptime'] = int(monotonicTime() - self.__startTime)
        status['self_code_version'] = self.__selfCodeVersion
        status['enabled_code_version'] = self.__enabledCodeVersion
        return status

    def _getStatus(self, args, callback):
        callback(self.getStatus(), None)

    def printStatus(self):
        """Dumps different debug info about cluster to default logger"""
        status = self.getStatus()
        for k, v in iteritems(status):
            logger.info('%s: %s' % (str(k), str(v)))

    def _printStatus(self):
        self.printStatus()

    def forceLogCompaction(self):
        """Force to start log compaction (without waiting required time or required number of entries)"""
        self.__forceLogCompaction = True

    def _forceLogCompaction(self):
        self.forceLogCompaction()

    def __doApplyCommand(self, command):
        commandType = ord(command[:1])
        # Skip no-op and membership change commands
        if commandType == _COMMAND_TYPE.VERSION:
            ver = pickle.loads(command[1:])
            if self.__selfCodeVersion < ver:
                raise SyncObjExceptionWrongVer(ver)
            oldVer = self.__enabledCodeVersion
            self.__enabledCodeVersion = ver
            callback = self.__conf.onCodeVersionChanged
            self.__onSetCodeVersion(ver)
            if callback is not None:
                callback(oldVer, ver)
            return

        # raftlog (FORK.md, 12): a membership entry changed the configuration when it was
        # appended (or, after a restart, when the journal was loaded); applied again here, an
        # older entry would put back a configuration a later one had replaced.
        if self.__parseChangeClusterRequest(command) is not None:
            return

        if commandType != _COMMAND_TYPE.REGULAR:
            return
        command = pickle.loads(command[1:])
        args = []
        kwargs = {
            '_doApply': True,
        }
        if not isinstance(command, tuple):
            funcID = command
        elif len(command) == 2:
            funcID, args = command
        else:
            funcID, args, newKwArgs = command
            kwargs.update(newKwArgs)

        return self._idToMethod[funcID](*args, **kwargs)

    def __startPreVote(self):
        """raftlog (FORK.md, 3): asks whether an election for the next term could be won,
        without raising this node's term; a node cut off from the others keeps its term, and
        does not depose a healthy leader when it returns."""
        if self.__raftLeader is not None:
            self.__raftLeader = None
            self.__onLeaderChanged()
        self.__preVoteTerm = self.__raftCurrentTerm + 1
        self.__preVotesCount = 1
        self.__preVotesFrom = set()
        for node in self.__otherNodes:
            self.__transport.send(node, {
                'type': 'pre_vote',
                'term': self.__preVoteTerm,
                'last_log_index': self.__getCurrentLogIndex(),
                'last_log_term': self.__getCurrentLogTerm(),
            })

    def __startElection(self, transfer=False):
        self.__preVoteTerm = None
        self.__raftLeader = None
        self.__setState(_RAFT_STATE.CANDIDATE)
        self.__setCurrentTerm(self.__raftCurrentTerm + 1, self.__selfNode.id)
        self.__votesCount = 1
        self.__votesFrom = set()
        for node in self.__otherNodes:
            self.__transport.send(node, {
                'type': 'request_vote',
                'term': self.__raftCurrentTerm,
                'last_log_index': self.__getCurrentLogIndex(),
                'last_log_term': self.__getCurrentLogTerm(),
                'transfer': transfer,
            })
        self.__onLeaderChanged()
        if self.__votesCount > (len(self.__otherNodes) + 1) / 2:
            self.__onBecomeLeader()

    def __inLeaderLease(self):
        """raftlog (FORK.md, 3): a leader, or a follower that heard from its leader within the
        minimum election timeout, refuses (pre-)votes: that leader is alive."""
        if self.__raftState == _RAFT_STATE.LEADER:
            return True
        return self.__raftLeader is not None and self.__lastLeaderContact is not None and \
            monotonicTime() - self.__lastLeaderContact < self.__conf.raftMinTimeout

    def isQuiesced(self):
        return self.__quiesced

    def nextTimer(self):
        """raftlog (FORK.md, 9): when a tick next has timer work to do (a leader's next
        heartbeat, a follower's or candidate's election deadline); while quiet, only a due
        log compaction."""
        if self.__quiesced:
            # A quiet group still cuts its log (takes a snapshot) when that is due.
            if len(self.__raftLog) > self.__conf.logCompactionMinEntries:
                return monotonicTime() + self.__conf.appendEntriesPeriod
            applied = self.__getEntries(self.__raftLastApplied - 1, 2)
            if len(applied) == 2 and applied[0][1] != self.__lastSerializedEntry:
                return self.__lastSerializedTime + self.__conf.logCompactionMinTime
            return None
        if self.__raftState == _RAFT_STATE.LEADER:
            return self.__newAppendEntriesTime
        return self.__raftElectionDeadline

    def unquiesce(self):
        """raftlog (FORK.md, 9): wakes a quiet group (a command, a peer that came or went or
        fell silent, a leadership transfer, a member added)."""
        if self.__quiesced:
            self.__unquiesce()

    def __unquiesce(self):
        """Timers resume as if the group's messages had kept coming while the nodes' own
        traffic did: a follower's election timeout runs from when it last heard its leader's
        node, a leader counts each follower as heard when its node last was (CheckQuorum)."""
        self.__quiesced = False
        self.__idleSince = None
        if self.__raftState == _RAFT_STATE.LEADER:
            for node in self.__otherNodes:
                heard = self.peerContact(node)
                if heard is not None and heard > self.__lastResponseTime.get(node, 0):
                    self.__lastResponseTime[node] = heard
            self.__newAppendEntriesTime = 0
        else:
            heard = self.peerContact(self.__raftLeader) if self.__raftLeader is not None else None
            if heard is not None:
                self.__lastLeaderContact = max(self.__lastLeaderContact or heard, heard)
            start = heard if heard is not None else monotonicTime()
            self.__raftElectionDeadline = start + self.__generateRaftTimeout()

    def onHeartbeat(self, node, term, leaderCommitIndex, prevLogIdx, prevLogTerm):
        """raftlog (FORK.md, 11): the common heartbeat, taken without the message handler:
        from this follower's leader, in its term, naming this log's last entry. Does what the
        handler does for it; returns None for any other case (the caller runs the handler),
        else whether a tick has entries to apply."""
        if self.__quiesced or self.__raftState != _RAFT_STATE.FOLLOWER or \
                term != self.__raftCurrentTerm or self.__raftLeader != node or \
                self.__transferInProgress or self.__selfNode is None:
            return None
        last = self.__raftLog[-1]
        if last[1] != prevLogIdx or last[2] != prevLogTerm:
            return None
        now = monotonicTime()
        self.__lastLeaderContact = now
        self.__preVoteTerm = None
        self.__raftElectionDeadline = now + self.__generateRaftTimeout()
        self.__leaderCommitIndex = leaderCommitIndex
        if leaderCommitIndex > self.__raftCommitIndex:
            # FORK.md, 1: the message confirmed the log up to prevLogIdx, its last entry.
            self.__raftCommitIndex = min(leaderCommitIndex, prevLogIdx)
            self.__raftLog.setRaftCommitIndex(self.__raftCommitIndex)
        self.__sendNextNodeIdx(node, nextNodeIdx=prevLogIdx + 1, success=True)
        return self.__raftCommitIndex > self.__raftLastApplied

    def onAppended(self, node, nextNodeIdx):
        """raftlog (FORK.md, 11): a follower's success answer (next_node_idx, no reset) to
        this leader, taken without the message handler. Returns None when the handler must
        run (not leader, or the answer wakes a quiet group), else whether it moved the
        follower's match index (a tick may then commit)."""
        if self.__raftState != _RAFT_STATE.LEADER or node not in self.__raftMatchIndex or \
                (self.__quiesced and nextNodeIdx != self.__getCurrentLogIndex() + 1):
            return None
        self.__lastResponseTime[node] = monotonicTime()
        if self.__raftMatchIndex[node] < nextNodeIdx - 1:
            self.__raftMatchIndex[node] = nextNodeIdx - 1
            self.__raftNextIndex[node] = nextNodeIdx
            return True
        return False

    def __keepsQuiet(self, message):
        if message['type'] == 'append_entries':
            return bool(message.get('quiesce'))
        return message['type'] == 'next_node_idx' and message['success'] and \
            not message['reset'] and message['next_node_idx'] == self.__getCurrentLogIndex() + 1

    def __tryQuiesce(self):
        """A leader whose log every connected follower holds, committed and applied, with
        nothing queued, goes quiet after quiesceAfter seconds: one last heartbeat carries the
        commit index and tells the followers to stop their election timers; nothing more
        is sent or ticked until something wakes the group."""
        now = monotonicTime()
        if self.__quiesced or self.__raftState != _RAFT_STATE.LEADER or \
                self.__transferInProgress or now < self.__transferAskedUntil:
            return
        last = self.__getCurrentLogIndex()
        connected = [node for node in self.__otherNodes if node in self.__connectedNodes]
        # raftlog (FORK.md, 12): observers get the whole log before the group goes quiet.
        observers = [node for node in self.__readonlyNodes if node in self.__connectedNodes]
        # A majority answered within the minimum election timeout: a leader woken because
        # its peers fell silent stays awake, so CheckQuorum can depose it.
        recent = now - self.__conf.raftMinTimeout
        heard = sum(1 for node in connected if self.__lastResponseTime.get(node, 0) > recent)
        # (Commands still queued were appended by this tick's _checkCommandsToApply.)
        idle = self.__raftCommitIndex == last == self.__raftLastApplied and \
            not self.__commandsWaitingCommit and heard + 1 > (len(self.__otherNodes) + 1) / 2 and \
            all(self.__raftMatchIndex.get(node, 0) == last for node in connected + observers)
        if not idle:
            self.__idleSince = None
            return
        if self.__idleSince is None:
            self.__idleSince = now
        if now - self.__idleSince < self.quiesceAfter:
            return
        for node in connected + observers:
            self.__transport.send(node, {
                'type': 'append_entries',
                'term': self.__raftCurrentTerm,
                'commit_index': self.__raftCommitIndex,
                'entries': [],
                'prevLogIdx': last,
                'prevLogTerm': self.__getCurrentLogTerm(),
                'quiesce': True,
            })
        self.__quiesced = True

    def __logUpToDate(self, message):
        """Raft's election restriction: the candidate's log is at least as up to date."""
        lastLogTerm = message['last_log_term']
        if lastLogTerm != self.__getCurrentLogTerm():
            return lastLogTerm > self.__getCurrentLogTerm()
        return message['last_log_index'] >= self.__getCurrentLogIndex()

    def __onMessageReceived(self, node, message):

        # raftlog (FORK.md, 9): anything but the leader's quiesce heartbeat, or a follower's
        # answer that it holds everything, wakes a quiet group.
        if self.__quiesced and not self.__keepsQuiet(message):
            self.__unquiesce()

        # raftlog (FORK.md, 4): a node with a higher term tells a stale leader so; the leader
        # takes the term and steps down, so a rejoining node costs one election, not a lockout.
        if message['type'] == 'stale_term':
            if message['term'] > self.__raftCurrentTerm:
                self.__setCurrentTerm(message['term'], None)
                self.__setState(_RAFT_STATE.FOLLOWER)
                if self.__raftLeader is not None:
                    self.__raftLeader = None
                    self.__onLeaderChanged()
            return

        if message['type'] == 'pre_vote' and self.__selfNode is not None and self.__selfVoter and \
                node in self.__otherNodes:
            if message['term'] <= self.__raftCurrentTerm:
                # The asker is a term behind: it learns the term, or it could never win (a
                # node that voted in a term whose leader never showed would refuse it forever).
                self.__transport.send(node, {'type': 'stale_term', 'term': self.__raftCurrentTerm})
            elif not self.__inLeaderLease() and self.__logUpToDate(message):
                self.__transport.send(node, {
                    'type': 'pre_vote_response',
                    'term': message['term'],
                })
            return

        if message['type'] == 'pre_vote_response':
            if self.__raftState != _RAFT_STATE.LEADER and self.__preVoteTerm is not None and \
                    message['term'] == self.__preVoteTerm == self.__raftCurrentTerm + 1 and \
                    node in self.__otherNodes and node not in self.__preVotesFrom:
                self.__preVotesFrom.add(node)
                self.__preVotesCount += 1
                if self.__preVotesCount > (len(self.__otherNodes) + 1) / 2:
                    self.__startElection()
            return

        if message['type'] == 'request_vote' and self.__selfNode is not None and \
                not message.get('transfer') and self.__inLeaderLease():
            # raftlog (FORK.md, 3): leader stickiness; a transfer's vote is the leader's wish
            return

        if message['type'] == 'timeout_now' and self.__selfNode is not None and self.__selfVoter:
            # Graceful leadership transfer (Raft 'TimeoutNow'): trigger an
            # immediate election, but only on request of the current leader.
            if message['term'] >= self.__raftCurrentTerm and node == self.__raftLeader:
                self.__raftElectionDeadline = 0
                self.__transferInProgress = True

        if message['type'] == 'request_vote' and self.__selfNode is not None and self.__selfVoter and \
                node in self.__otherNodes:

            if message['term'] > self.__raftCurrentTerm:
                self.__setCurrentTerm(message['term'], None)
                self.__setState(_RAFT_STATE.FOLLOWER)
                self.__raftLeader = None

            if self.__raftState in (_RAFT_STATE.FOLLOWER, _RAFT_STATE.CANDIDATE):
                lastLogTerm = message['last_log_term']
                lastLogIdx = message['last_log_index']
                if message['term'] >= self.__raftCurrentTerm:
                    if lastLogTerm < self.__getCurrentLogTerm():
                        return
                    if lastLogTerm == self.__getCurrentLogTerm() and \
                            lastLogIdx < self.__getCurrentLogIndex():
                        return
                    if self.__votedForNodeId is not None:
                        return

                    self.__setCurrentTerm(self.__raftCurrentTerm, node.id)

                    self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()
                    self.__transport.send(node, {
                        'type': 'response_vote',
                        'term': message['term'],
                    })

        if message['type'] == 'append_entries' and message['term'] < self.__raftCurrentTerm:
            self.__transport.send(node, {'type': 'stale_term', 'term': self.__raftCurrentTerm})

        if message['type'] == 'append_entries' and message['term'] >= self.__raftCurrentTerm:
            self.__lastLeaderContact = monotonicTime()
            self.__preVoteTerm = None
            if message['term'] > self.__raftCurrentTerm:
                # A new leader at a higher term supersedes any pending transfer.
                self.__transferInProgress = False
            if not self.__transferInProgress:
                # While a transfer is pending, ignore same-term heartbeats from
                # the outgoing leader so they can't postpone the forced election.
                self.__raftElectionDeadline = monotonicTime() + self.__generateRaftTimeout()
            if self.__raftLeader != node:
                self.__onLeaderChanged()
            self.__raftLeader = node
            if message['term'] > self.__raftCurrentTerm:
                self.__setCurrentTerm(message['term'], None)
            self.__setState(_RAFT_STATE.FOLLOWER)
            newEntries = message.get('entries', [])
            serialized = message.get('serialized', None)
            self.__leaderCommitIndex = leaderCommitIndex = message['commit_index']
            # raftlog: the last index this message shows to match the leader's log; only up
            # to it may the leader's commit index be taken over (FORK.md, 1).
            confirmedIdx = None

            # Regular append entries
            if 'prevLogIdx' in message:
                transmission = message.get('transmission', None)
                if transmission is not None:
                    if transmission == 'start':
                        self.__recvTransmission = message['data']
                        self.__sendNextNodeIdx(node, success=False, reset=False)
                        return
                    elif transmission == 'process':
                        self.__recvTransmission += message['data']
                        self.__sendNextNodeIdx(node, success=False, reset=False)
                        return
                    elif transmission == 'finish':
                        self.__recvTransmission += message['data']
                        newEntries = [pickle.loads(self.__recvTransmission)]
                        self.__recvTransmission = ''
                    else:
                        raise Exception('Wrong transmission type')

                prevLogIdx = message['prevLogIdx']
                prevLogTerm = message['prevLogTerm']
                prevEntries = self.__getEntries(prevLogIdx)
                if not prevEntries:
                    self.__sendNextNodeIdx(node, success=False, reset=True)
                    return
                if prevEntries[0][2] != prevLogTerm:
                    # raftlog (FORK.md, 8): the entry at prevLogIdx is not the leader's, so
                    # neither is any after it: they are cut now, and the answer names the
                    # start of the conflicting term's run, so that every answer still in
                    # flight (upstream: "after my last entry") agrees with it.
                    self.__sendNextNodeIdx(node, nextNodeIdx=self.__cutDivergence(
                        prevLogIdx, prevEntries[0][2], prevLogTerm), success=False, reset=True)
                    return
                # raftlog: an entry this log holds with the same index and term is the same
                # entry (Raft's log matching): it is kept, and only an entry that conflicts is
                # cut, with all after it (FORK.md, 2).
                held = 0
                while held < len(newEntries) and held + 1 < len(prevEntries) and \
                        prevEntries[held + 1][2] == newEntries[held][2]:
                    held += 1
                newEntries = newEntries[held:]
                if newEntries and len(prevEntries) > held + 1:
                    conflictIdx = prevLogIdx + held + 1
                    # rollback cluster changes
                    if self.__conf.dynamicMembershipChange:
                        for entry in reversed(prevEntries[held + 1:]):
                            clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                            if clusterChangeRequest is not None:
                                self.__doChangeCluster(clusterChangeRequest, reverse=True)

                    if conflictIdx <= self.__raftLastApplied:
                        logger.critical(
                            'truncating already-applied log entries from index %d '
                            '(last applied: %d) - state machine may have diverged from '
                            'other cluster members', conflictIdx, self.__raftLastApplied)
                    self.__deleteEntriesFrom(conflictIdx)
                for entry in newEntries:
                    self.__raftLog.add(*entry)

                # apply cluster changes
                if self.__conf.dynamicMembershipChange:
                    for entry in newEntries:
                        clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                        if clusterChangeRequest is not None:
                            self.__doChangeCluster(clusterChangeRequest)

                confirmedIdx = prevLogIdx + held + len(newEntries)
                nextNodeIdx = confirmedIdx + 1

                self.__sendNextNodeIdx(node, nextNodeIdx=nextNodeIdx, success=True)

            # Install snapshot
            elif serialized is not None:
                if self.__serializer.setTransmissionData(serialized):
                    self.__loadDumpFile(clearJournal=True)
                    # raftlog (FORK.md, 7): the snapshot confirms its last entry; entries a
                    # log kept after it (Raft's InstallSnapshot rule) are not confirmed yet.
                    confirmedIdx = self.__raftLastApplied
                    self.__sendNextNodeIdx(node, nextNodeIdx=confirmedIdx + 1, success=True)

            # If the log was truncated below the commit index, don't persist a commit
            # index covering entries that are no longer the committed ones.
            if self.__raftCommitIndex > self.__getCurrentLogIndex():
                self.__raftCommitIndex = self.__getCurrentLogIndex()

            # raftlog: Raft's rule, min(leaderCommit, index of the last entry this message
            # confirmed); upstream took min(leaderCommit, own last index), which committed
            # a divergent tail a deposed leader still held (FORK.md, 1).
            if confirmedIdx is not None and leaderCommitIndex > self.__raftCommitIndex:
                self.__raftCommitIndex = max(self.__raftCommitIndex,
                                             min(leaderCommitIndex, confirmedIdx))

            self.__raftLog.setRaftCommitIndex(self.__raftCommitIndex)

            # raftlog (FORK.md, 9): the leader went quiet; so does a follower that holds and
            # has committed exactly the leader's log.
            if message.get('quiesce') and confirmedIdx == self.__getCurrentLogIndex() == \
                    self.__raftCommitIndex == leaderCommitIndex:
                self.__quiesced = True

        if message['type'] == 'apply_command' and not self.forwardCommands:
            if 'request_id' in message:
                self.__callErrCallback(FAIL_REASON.REQUEST_DENIED, (node, message['request_id']))
        elif message['type'] == 'apply_command':
            if 'request_id' in message:
                self._applyCommand(message['command'], (node, message['request_id']))
            else:
                self._applyCommand(message['command'], None)

        if message['type'] == 'apply_command_response':
            requestID = message['request_id']
            error = message.get('error', None)
            callback = self.__commandsWaitingReply.pop(requestID, None)
            if callback is not None:
                if error is not None:
                    callback(None, error)
                else:
                    idx = message['log_idx']
                    term = message['log_term']
                    if idx <= self.__raftLastApplied:
                        # Stale apply_command_response:
                        # The log position was already applied (e.g. via snapshot installed after leader reconnect)
                        # before this response was processed. Or the leader was restarted without notice (and remains leader).
                        # The command outcome cannot be tracked; signal the caller so it can retry rather than hanging
                        # forever.
                        callback(None, FAIL_REASON.UNKNOWN_OUTCOME)
                    else:
                        self.__commandsWaitingCommit[idx].append((term, callback))

        if self.__raftState == _RAFT_STATE.CANDIDATE:
            if message['type'] == 'response_vote' and message['term'] == self.__raftCurrentTerm and \
                    node in self.__otherNodes and node not in self.__votesFrom:
                self.__votesFrom.add(node)
                self.__votesCount += 1

                if self.__votesCount > (len(self.__otherNodes) + 1) / 2:
                    self.__onBecomeLeader()

        if self.__raftState == _RAFT_STATE.LEADER:
            if message['type'] == 'next_node_idx':
                reset = message['reset']
                nextNodeIdx = message['next_node_idx']
                success = message['success']

                currentNodeIdx = nextNodeIdx - 1
                if reset:
                    self.__raftNextIndex[node] = nextNodeIdx
                if success:
                    if self.__raftMatchIndex[node] < currentNodeIdx:
                        self.__raftMatchIndex[node] = currentNodeIdx
                        self.__raftNextIndex[node] = nextNodeIdx
                self.__lastResponseTime[node] = monotonicTime()

    def __callErrCallback(self, err, callback):
        if callback is None:
            return
        if isinstance(callback, tuple):
            requestNode, requestID = callback
            self.__transport.send(requestNode, {
                'type': 'apply_command_response',
                'request_id': requestID,
                'error': err,
            })
            return
        callback(None, err)

    def __sendNextNodeIdx(self, node, reset=False, nextNodeIdx = None, success = False):
        if nextNodeIdx is None:
            nextNodeIdx = self.__getCurrentLogIndex() + 1
        self.__transport.send(node, {
            'type': 'next_node_idx',
            'next_node_idx': nextNodeIdx,
            'reset': reset,
            'success': success,
        })

    def __generateRaftTimeout(self):
        minTimeout = self.__conf.raftMinTimeout
        maxTimeout = self.__conf.raftMaxTimeout
        return minTimeout + (maxTimeout - minTimeout) * random.random()

    def __onReadonlyNodeConnected(self, node):
        if node in self.__otherNodes:  # raftlog (FORK.md, 12): it became a voter meanwhile
            self.__connectedNodes.add(node)
            return
        self.__readonlyNodes.add(node)
        self.__connectedNodes.add(node)
        self.__raftNextIndex[node] = self.__getCurrentLogIndex() + 1
        self.__raftMatchIndex[node] = 0

    def __onReadonlyNodeDisconnected(self, node):
        self.__readonlyNodes.discard(node)
        self.__connectedNodes.discard(node)
        self.__raftNextIndex.pop(node, None)
        self.__raftMatchIndex.pop(node, None)
        node._destroy()

    def __onNodeConnected(self, node):
        self.__connectedNodes.add(node)

    def __onNodeDisconnected(self, node):
        self.__connectedNodes.discard(node)

    def __getCurrentLogIndex(self):
        return self.__raftLog[-1][1]

    def __getCurrentLogTerm(self):
        return self.__raftLog[-1][2]

    def __getPrevLogIndexTerm(self, nextNodeIndex):
        prevIndex = nextNodeIndex - 1
        entries = self.__getEntries(prevIndex, 1)
        if entries:
            return prevIndex, entries[0][2]
        return None, None

    def __getEntries(self, fromIDx, count=None, maxSizeBytes = None):
        firstEntryIDx = self.__raftLog[0][1]
        if fromIDx is None or fromIDx < firstEntryIDx:
            return []
        diff = fromIDx - firstEntryIDx
        if count is None:
            result = self.__raftLog[diff:]
        else:
            result = self.__raftLog[diff:diff + count]
        if maxSizeBytes is None:
            return result
        totalSize = 0
        i = 0
        for i, entry in enumerate(result):
            totalSize += len(entry[0])
            if totalSize >= maxSizeBytes:
                break
        return result[:i + 1]

    def _isLeader(self):
        """ Check if current node has a leader state.
        WARNING: there could be multiple leaders at the same time!

        :return: True if leader, False otherwise
        :rtype: bool
        """
        return self.__raftState == _RAFT_STATE.LEADER

    def _getLeader(self):
        """ Returns last known leader.

        WARNING: this information could be outdated, eg. there could be another leader selected!
        WARNING: there could be multiple leaders at the same time!

        :return: the last known leader node.
        :rtype: Node
        """
        return self.__raftLeader

    def isReady(self):
        """Check if current node is initially synced with others and has an actual data.

        :return: True if ready, False otherwise
        :rtype: bool
        """
        return self.__onReadyCalled

    def _isReady(self):
        return self.isReady()

    def _getTerm(self):
        return self.__raftCurrentTerm

    def _getRaftLogSize(self):
        return len(self.__raftLog)

    def __cutDivergence(self, idx, ownTerm, leaderTerm):
        """raftlog (FORK.md, 8): cuts the entries a mismatch at idx proves are not the
        leader's; returns the index the leader should send from."""
        floor = self.__raftCommitIndex + 1
        if idx < floor:
            logger.critical('a committed entry (%d) does not match the leader\'s', idx)
            return idx
        firstEntryIDx = self.__raftLog[0][1]
        cut = idx
        # Terms only grow along a log: the leader's entries before idx have terms up to
        # leaderTerm, so an entry of a later term cannot be one of them.
        while cut - 1 >= max(floor, firstEntryIDx + 1) and \
                self.__raftLog[cut - 1 - firstEntryIDx][2] > leaderTerm:
            cut -= 1
        if self.__conf.dynamicMembershipChange:
            for entry in reversed(self.__getEntries(cut)):
                clusterChangeRequest = self.__parseChangeClusterRequest(entry[0])
                if clusterChangeRequest is not None:
                    self.__doChangeCluster(clusterChangeRequest, reverse=True)
        self.__deleteEntriesFrom(cut)
        hint = cut
        while hint - 1 >= max(floor, firstEntryIDx + 1) and \
                self.__raftLog[hint - 1 - firstEntryIDx][2] == ownTerm:
            hint -= 1
        return hint

    def __deleteEntriesFrom(self, fromIDx):
        firstEntryIDx = self.__raftLog[0][1]
        diff = fromIDx - firstEntryIDx
        if diff < 0:
            return
        self.__raftLog.deleteEntriesFrom(diff)

    def __deleteEntriesTo(self, toIDx):
        firstEntryIDx = self.__raftLog[0][1]
        diff = toIDx - firstEntryIDx
        if diff < 0:
            return
        self.__raftLog.deleteEntriesTo(diff)

    def __onBecomeLeader(self):
        self.__raftLeader = self.__selfNode
        self.__setState(_RAFT_STATE.LEADER)

        self.__lastResponseTime.clear()
        for node in self.__otherNodes | self.__readonlyNodes:
            self.__raftNextIndex[node] = self.__getCurrentLogIndex() + 1
            self.__raftMatchIndex[node] = 0
            self.__lastResponseTime[node] = monotonicTime()

        # No-op command after leader election.
        idx, term = self.__getCurrentLogIndex() + 1, self.__raftCurrentTerm
        self.__raftLog.add(_bchr(_COMMAND_TYPE.NO_OP), idx, term)
        self.__noopIDx = idx
        if not self.__conf.appendEntriesUseBatch:
            self.__sendAppendEntries()

        self.__sendAppendEntries()

    def __failUncommitted(self):
        """raftlog (FORK.md, 5): a leader that steps down answers what it has not committed
        at once (Kafka's NOT_LEADER_OR_FOLLOWER), instead of leaving its clients to wait for a
        commit that a new leader may never make; the outcome is unknown to them either way."""
        waiting = [idx for idx in self.__commandsWaitingCommit if idx > self.__raftCommitIndex]
        for idx in sorted(waiting):
            for _term, callback in self.__commandsWaitingCommit.pop(idx):
                callback(None, FAIL_REASON.NOT_LEADER)

    def __setCurrentTerm(self, term, votedForNodeId):
        self.__raftCurrentTerm = term
        self.__votedForNodeId = votedForNodeId
        self.__raftLog.setCurrentTerm(term, votedForNodeId)

    def __setState(self, newState):
        oldState = self.__raftState
        self.__raftState = newState
        if oldState == _RAFT_STATE.LEADER and newState != _RAFT_STATE.LEADER:
            self.__failUncommitted()
        callback = self.__conf.onStateChanged
        if callback is not None and oldState != newState:
            callback(oldState, newState)

    def __onLeaderChanged(self):
        for id in sorted(self.__commandsWaitingReply):
            self.__commandsWaitingReply[id](None, FAIL_REASON.LEADER_CHANGED)
        self.__commandsWaitingReply = {}

    def __sendAppendEntries(self):
        self.__newAppendEntriesTime = monotonicTime() + self.__conf.appendEntriesPeriod

        startTime = monotonicTime()

        batchSizeBytes = self.__conf.appendEntriesBatchSizeBytes

        for node in self.__otherNodes | self.__readonlyNodes:
            if node not in self.__connectedNodes:
                self.__serializer.cancelTransmisstion(node)
                continue

            sendSingle = True
            sendingSerialized = False
            nextNodeIndex = self.__raftNextIndex[node]

            while nextNodeIndex <= self.__getCurrentLogIndex() or sendSingle or sendingSerialized:
                if nextNodeIndex > self.__raftLog[0][1]:
                    prevLogIdx, prevLogTerm = self.__getPrevLogIndexTerm(nextNodeIndex)
                    entries = []
                    if nextNodeIndex <= self.__getCurrentLogIndex():
                        entries = self.__getEntries(nextNodeIndex, None, batchSizeBytes)
                        self.__raftNextIndex[node] = entries[-1][1] + 1

                    if len(entries) == 1 and len(entries[0][0]) >= batchSizeBytes:
                        entry = pickle.dumps(entries[0])
                        for pos in xrange(0, len(entry), batchSizeBytes):
                            currData = entry[pos:pos + batchSizeBytes]
                            if pos == 0:
                                transmission = 'start'
                            elif pos + batchSizeBytes >= len(entries[0][0]):
                                transmission = 'finish'
                            else:
                                transmission = 'process'
                            message = {
                                'type': 'append_entries',
                                'transmission': transmission,
                                'data': currData,
                                'term': self.__raftCurrentTerm,
                                'commit_index': self.__raftCommitIndex,
                                'prevLogIdx': prevLogIdx,
                                'prevLogTerm': prevLogTerm,
                            }
                            self.__transport.send(node, message)
                            if node not in self.__connectedNodes:
                                break
                    else:
                        message = {
                            'type': 'append_entries',
                            'term': self.__raftCurrentTerm,
                            'commit_index': self.__raftCommitIndex,
                            'entries': entries,
                            'prevLogIdx': prevLogIdx,
                            'prevLogTerm': prevLogTerm,
                        }
                        self.__transport.send(node, message)
                        if node not in self.__connectedNodes:
                            break
                else:
                    transmissionData = self.__serializer.getTransmissionData(node)
                    message = {
                        'type': 'append_entries',
                        'term': self.__raftCurrentTerm,
                        'commit_index': self.__raftCommitIndex,
                        'serialized': transmissionData,
                    }
                    self.__transport.send(node, message)
                    if node not in self.__connectedNodes:
                        break

                    if transmissionData is not None:
                        isLast = transmissionData[2]
                        if isLast:
                            self.__raftNextIndex[node] = self.__raftLog[1][1] + 1
                            sendingSerialized = False
                        else:
                            sendingSerialized = True
                    else:
                        sendingSerialized = False

                nextNodeIndex = self.__raftNextIndex[node]

                sendSingle = False

                delta = monotonicTime() - startTime
                if delta > self.__conf.appendEntriesPeriod:
                    break

    def __connectedToAnyone(self):
        return len(self.__connectedNodes) > 0 or len(self.__otherNodes) == 0

    def _getConf(self):
        return self.__conf

    @property
    def conf(self):
        return self.__conf

    def _getEncryptor(self):
        return self.__encryptor

    @property
    def encryptor(self):
        return self.__encryptor

    def __changeCluster(self, request):
        if self.__raftLastApplied < self.__noopIDx:
            # No-op entry was not commited yet
            return False

        if self.__changeClusterIDx is not None:
            if self.__raftLastApplied >= self.__changeClusterIDx:
                self.__changeClusterIDx = None

        # Previous cluster change request was not commited yet
        if self.__changeClusterIDx is not None:
            return False

        return self.__doChangeCluster(request)

    def __setCodeVersion(self, newVersion):
        self.__enabledCodeVersion = newVersion

    def __doChangeCluster(self, request, reverse = False):
        requestType = request[0]
        requestNodeId = request[1]
        if len(request) >= 5:
            # raftlog (FORK.md, 12): the whole configuration after the change (and, to take
            # it back when the entry is cut, before it).
            return self.__setVoters(request[4] if reverse else request[3])
        if len(request) >= 3:
            requestNode = request[2]
            if not isinstance(requestNode, Node): # Actually shouldn't be necessary, but better safe than sorry.
                requestNode = self.__nodeClass(requestNode)
        else:
            requestNode = self.__nodeClass(requestNodeId)

        if requestType == 'add':
            adding = not reverse
        elif requestType == 'rem':
            adding = reverse
        else:
            return False

        if requestNode == self.__selfNode:
            # raftlog (FORK.md, 12): this node becomes a voter, or an observer
            changed = self.__selfVoter != adding
            self.__selfVoter = adding
            return changed
        if adding:
            if requestNode in self.__otherNodes:
                return False
            self.__promote(requestNode)
            return True
        if requestNode not in self.__otherNodes:
            return False
        self.__demote(requestNode)
        return True

    def __promote(self, node):
        """raftlog (FORK.md, 12): a node becomes a voter (an observer keeps its progress)."""
        self.__readonlyNodes.discard(node)
        self.__otherNodes.add(node)
        self.__raftNextIndex.setdefault(node, self.__getCurrentLogIndex() + 1)
        self.__raftMatchIndex.setdefault(node, 0)
        if self._isLeader():
            self.__lastResponseTime[node] = monotonicTime()
        self.__transport.addNode(node)

    def __demote(self, node):
        """raftlog (FORK.md, 12): a voter leaves the configuration; connected, it observes."""
        self.__otherNodes.discard(node)
        self.__lastResponseTime.pop(node, None)
        self.__transport.dropNode(node)
        if node in self.__connectedNodes:
            self.__readonlyNodes.add(node)
        else:
            self.__raftNextIndex.pop(node, None)
            self.__raftMatchIndex.pop(node, None)

    def __setVoters(self, voterIds):
        """raftlog (FORK.md, 12): makes the configuration exactly these voters; returns
        whether it changed."""
        known = {node.id: node for node in self.__otherNodes | self.__readonlyNodes}
        if self.__selfNode is not None:
            known[self.__selfNode.id] = self.__selfNode
        wanted = {known.get(i) or Node(i) for i in voterIds}
        selfVoter = self.__selfNode is not None and self.__selfNode in wanted
        others = wanted - {self.__selfNode}
        changed = selfVoter != self.__selfVoter or others != self.__otherNodes
        for node in self.__otherNodes - others:
            self.__demote(node)
        for node in others - self.__otherNodes:
            self.__promote(node)
        self.__selfVoter = selfVoter
        return changed

    def __absoluteChange(self, request):
        """raftlog (FORK.md, 12): a leader's membership request as the entry it appends:
        [type, node id, node, voters after, voters before], or None if it is refused (a
        voter added twice, a node not a voter removed, the last voter removed, a bounded add
        to a set at its bound: 13). A leader
        asked to remove itself refuses and hands its leadership to a caught-up voter; the
        request made again then reaches the next leader."""
        requestType, requestNodeId = request[0], request[1]
        requestNode = request[2] if len(request) >= 3 else Node(requestNodeId)
        # raftlog (FORK.md, 13): a bounded add ([type, id, node, at most]) is judged here, on
        # the configuration that this append follows, not on the asking node's older view.
        atMost = request[3] if len(request) == 4 else None
        before = set(self.voterIds)
        if requestType == 'add' and requestNodeId not in before and \
                (atMost is None or len(before) < atMost):
            after = before | {requestNodeId}
        elif requestType == 'rem' and requestNodeId in before and len(before) > 1:
            if requestNodeId == self.__selfNode.id:
                self.transferLeadership()
                return None
            after = before - {requestNodeId}
        else:
            return None
        return [requestType, requestNodeId, requestNode, sorted(after), sorted(before)]

    @property
    def isVoter(self):
        """raftlog (FORK.md, 12): whether this node is one of the voters."""
        return self.__selfVoter

    @property
    def voterIds(self):
        """raftlog (FORK.md, 12): the ids of the voters, as this node's log has them."""
        voters = {node.id for node in self.__otherNodes}
        if self.__selfVoter and self.__selfNode is not None:
            voters.add(self.__selfNode.id)
        return voters

    def __parseChangeClusterRequest(self, command):
        commandType = ord(command[:1])
        if commandType != _COMMAND_TYPE.MEMBERSHIP:
            return None
        return pickle.loads(command[1:])

    def __tryLogCompaction(self):
        currTime = monotonicTime()
        serializeState, serializeID = self.__serializer.checkSerializing()

        if serializeState == SERIALIZER_STATE.SUCCESS:
            self.__lastSerializedTime = currTime
            self.__deleteEntriesTo(serializeID)
            self.__lastSerializedEntry = serializeID

        if serializeState == SERIALIZER_STATE.FAILED:
            logger.warning('Failed to store full dump')

        if serializeState != SERIALIZER_STATE.NOT_SERIALIZING:
            return

        if len(self.__raftLog) <= self.__conf.logCompactionMinEntries and \
                                currTime - self.__lastSerializedTime <= self.__conf.logCompactionMinTime and \
                not self.__forceLogCompaction:
            return

        if self.__conf.logCompactionSplit:
            allNodeIds = sorted([node.id for node in (self.__otherNodes | {self.__selfNode})])
            nodesCount = len(allNodeIds)
            selfIdx = allNodeIds.index(self.__selfNode.id)
            interval = self.__conf.logCompactionMinTime
            periodStart = int(currTime / interval ) * interval
            nodeInterval = float(interval) / nodesCount
            nodeIntervalStart = periodStart + selfIdx * nodeInterval
            nodeIntervalEnd = nodeIntervalStart + 0.3 * nodeInterval
            if currTime < nodeIntervalStart or currTime >= nodeIntervalEnd:
                return

        self.__forceLogCompaction = False

        lastAppliedEntries = self.__getEntries(self.__raftLastApplied - 1, 2)
        if len(lastAppliedEntries) < 2 or lastAppliedEntries[0][1] == self.__lastSerializedEntry:
            self.__lastSerializedTime = currTime
            return

        if self.__conf.serializer is None:
            selfData = dict([(k, v) for k, v in iteritems(self.__dict__)
                             if k not in self.__properies and k not in self._SETTINGS])
            data = selfData
            if self.__consumers:
                data = [selfData]
                for consumer in self.__consumers:
                    data.append(consumer._serialize())
        else:
            data = None
        cluster = self.__otherNodes | ({self.__selfNode} if self.__selfVoter else set())
        self.__serializer.serialize((data, lastAppliedEntries[1], lastAppliedEntries[0], cluster), lastAppliedEntries[0][1])

    def __loadDumpFile(self, clearJournal):
        try:
            data = self.__serializer.deserialize()
            if data[0] is not None:
                if self.__consumers:
                    selfData = data[0][0]
                    consumersData = data[0][1:]
                else:
                    selfData = data[0]
                    consumersData = []

                for k, v in iteritems(selfData):
                    self.__dict__[k] = v

                for i, consumer in enumerate(self.__consumers):
                    consumer._deserialize(consumersData[i])

            if clearJournal or \
                    len(self.__raftLog) < 2 or \
                    self.__raftLog[0] != data[2] or \
                    self.__raftLog[1] != data[1]:
                self.__raftLog.clear()
                self.__raftLog.add(*data[2])
                self.__raftLog.add(*data[1])

            self.__raftLastApplied = data[1][1]

            if self.__raftCommitIndex > self.__getCurrentLogIndex():
                logger.warning('raftCommitIndex (%d) exceeds journal end (%d) after loading dump, '
                               'likely due to unsynced journal entries lost on crash; '
                               'clamping to journal end',
                               self.__raftCommitIndex, self.__getCurrentLogIndex())
                self.__raftCommitIndex = self.__getCurrentLogIndex()
                self.__raftLog.setRaftCommitIndex(self.__raftCommitIndex)

            if self.__conf.dynamicMembershipChange:
                # raftlog (FORK.md, 12): a dump names this node only if it is a voter (a dump
                # written before observers always named it)
                self.__selfVoter = self.__selfNode in data[3]
                self.__updateClusterConfiguration([node for node in data[3] if node != self.__selfNode])
            self.__onSetCodeVersion(0)
        except:
            logger.exception('failed to load full dump')

    def __updateClusterConfiguration(self, newNodes):
        # newNodes: list of Node or node ID
        newNodes = {self.__nodeClass(node) if not isinstance(node, Node) else node for node in newNodes}
        # raftlog (FORK.md, 12): a voter that leaves observes, an observer that joins keeps
        # its progress
        for node in self.__otherNodes - newNodes:
            self.__demote(node)
        for node in newNodes - self.__otherNodes:
            self.__promote(node)

def __copy_func(f, name):
    if is_py3:
        res = types.FunctionType(f.__code__, f.__globals__, name, f.__defaults__, f.__closure__)
        res.__dict__ = f.__dict__
    else:
        res = types.FunctionType(f.func_code, f.func_globals, name, f.func_defaults, f.func_closure)
        res.func_dict = f.func_dict
    return res

class AsyncResult(object):
    def __init__(self):
        self.result = None
        self.error = None
        self.event = threading.Event()

    def onResult(self, res, err):
        self.result = res
        self.error = err
        self.event.set()


def replicated(*decArgs, **decKwargs):
    """Replicated decorator. Use it to mark your class members that modifies
    a class state. Function will be called asynchronously. Function accepts
    flowing additional parameters (optional):
        'callback': callback(result, failReason), failReason - `FAIL_REASON <#pysyncobj.FAIL_REASON>`_.
        'sync': True - to block execution and wait for result, False - async call. If callback is passed,
            'sync' option is ignored.
        'timeout': if 'sync' is enabled, and no result is available for 'timeout' seconds -
            SyncObjException will be raised.
    These parameters are reserved and should not be used in kwargs of your replicated method.

    :param func: arbitrary class member
    :type func: function
    :param ver: (optional) - code version (for zero deployment)
    :type ver: int
    """
    def replicatedImpl(func):
        def newFunc(self, *args, **kwargs):

            if kwargs.pop('_doApply', False):
                return func(self, *args, **kwargs)
            else:
                if isinstance(self, SyncObj):
                    applier = self._applyCommand
                    funcName = self._getFuncName(func.__name__)
                    funcID = self._methodToID[funcName]
                elif isinstance(self, SyncObjConsumer):
                    consumerId = id(self)
                    funcName = self._syncObj._getFuncName((consumerId, func.__name__))
                    funcID = self._syncObj._methodToID[(consumerId, funcName)]
                    applier = self._syncObj._applyCommand
                else:
                    raise SyncObjException("Class should be inherited from SyncObj or SyncObjConsumer")

                callback = kwargs.pop('callback', None)
                if kwargs:
                    cmd = (funcID, args, kwargs)
                elif args and not kwargs:
                    cmd = (funcID, args)
                else:
                    cmd = funcID
                sync = kwargs.pop('sync', False)
                if callback is not None:
                    sync = False

                if sync:
                    asyncResult = AsyncResult()
                    callback = asyncResult.onResult

                timeout = kwargs.pop('timeout', None)
                applier(pickle.dumps(cmd), callback, _COMMAND_TYPE.REGULAR)

                if sync:
                    res = asyncResult.event.wait(timeout)
                    if not res:
                        raise SyncObjException('Timeout')
                    if not asyncResult.error == 0:
                        raise SyncObjException(asyncResult.error)
                    return asyncResult.result

        func_dict = newFunc.__dict__ if is_py3 else newFunc.func_dict
        func_dict['replicated'] = True
        func_dict['ver'] = int(decKwargs.get('ver', 0))
        func_dict['origName'] = func.__name__

        callframe = sys._getframe(1 if decKwargs else 2)
        namespace = callframe.f_locals
        newFuncName = func.__name__ + '_v' + str(func_dict['ver'])
        namespace[newFuncName] = __copy_func(newFunc, newFuncName)
        functools.update_wrapper(newFunc, func)
        return newFunc

    if len(decArgs) == 1 and len(decKwargs) == 0 and callable(decArgs[0]):
        return replicatedImpl(decArgs[0])

    return replicatedImpl

def replicated_sync(*decArgs, **decKwargs):
    def replicated_sync_impl(func, timeout = None):
        """Same as replicated, but synchronous by default.

        :param func: arbitrary class member
        :type func: function
        :param timeout: time to wait (seconds). Default: None
        :type timeout: float or None
        """

        def newFunc(self, *args, **kwargs):
            if kwargs.get('_doApply', False):
                return replicated(func)(self, *args, **kwargs)
            else:
                kwargs.setdefault('timeout', timeout)
                kwargs.setdefault('sync', True)
                return replicated(func)(self, *args, **kwargs)
        func_dict = newFunc.__dict__ if is_py3 else newFunc.func_dict
        func_dict['replicated'] = True
        func_dict['ver'] = int(decKwargs.get('ver', 0))
        func_dict['origName'] = func.__name__

        callframe = sys._getframe(1 if decKwargs else 2)
        namespace = callframe.f_locals
        newFuncName = func.__name__ + '_v' + str(func_dict['ver'])
        namespace[newFuncName] = __copy_func(newFunc, newFuncName)
        functools.update_wrapper(newFunc, func)
        return newFunc

    if len(decArgs) == 1 and len(decKwargs) == 0 and callable(decArgs[0]):
        return replicated_sync_impl(decArgs[0])

    return replicated_sync_impl
