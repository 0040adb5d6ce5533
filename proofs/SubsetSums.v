(* The bounds on the attention of a placement (spec/rules.md, rule cubic
   "Definitions"; used by cubic and subcubic_gap, checker functions
   cubic._subset_sum_bounds and subcubic_gap._Query):
   for every set P of c non-query positions,
      S_c^lo = (sum of the c smallest lower endpoints)
             <= S_P = sum_{i in P} beta_i
             <= (sum of the c largest upper endpoints) = S_c^hi,
   and the max token's copies weigh (B - S_P) e_m (Softmax.max_token_weight).
   Only the standard library. *)
From Coq Require Import Reals Lra Lia List Bool Arith Permutation Sorting.Sorted.
From MaxK Require Import Sums.
Import ListNotations.
Open Scope R_scope.

Definition lsum (l : list R) : R := fold_right Rplus 0 l.

Lemma lsum_app : forall l1 l2, lsum (l1 ++ l2) = lsum l1 + lsum l2.
Proof. intros l1 l2; induction l1; simpl; [lra|]. rewrite IHl1; lra. Qed.

Lemma lsum_perm : forall l1 l2, Permutation l1 l2 -> lsum l1 = lsum l2.
Proof. intros l1 l2 H; induction H; simpl; lra. Qed.

Lemma lsum_firstn_S : forall l c, (c < length l)%nat ->
  lsum (firstn (S c) l) = lsum (firstn c l) + nth c l 0.
Proof.
  intros l; induction l as [|a l IH]; intros c Hc; simpl in Hc; [lia|].
  destruct c as [|c]; simpl; [lra|].
  simpl in IH. rewrite IH by lia. lra.
Qed.

(** The core: in an ascending list, the first c elements sum to at most the
    sum of any c elements (any sub-multiset of size c). *)
Theorem firstn_sorted_le : forall (Ls : list R) (s r : list R),
  StronglySorted Rle Ls -> Permutation Ls (s ++ r) ->
  lsum (firstn (length s) Ls) <= lsum s.
Proof.
  intros Ls; induction Ls as [|a Ls IH]; intros s r Hs Hp.
  - apply Permutation_nil in Hp. apply app_eq_nil in Hp. destruct Hp as [-> _]. simpl; lra.
  - apply StronglySorted_inv in Hs. destruct Hs as [Hs Ha].
    assert (Hin : In a (s ++ r)) by (apply (Permutation_in a Hp); left; reflexivity).
    apply in_app_or in Hin. destruct Hin as [Hin|Hin].
    + (* a is one of the chosen *)
      apply in_split in Hin. destruct Hin as [s1 [s2 ->]].
      assert (Hp' : Permutation Ls ((s1 ++ s2) ++ r)).
      { apply Permutation_cons_inv with a.
        eapply perm_trans; [exact Hp|].
        repeat rewrite <- app_assoc. simpl. apply Permutation_sym, Permutation_middle. }
      specialize (IH (s1 ++ s2) r Hs Hp').
      rewrite app_length in *. simpl length. rewrite Nat.add_succ_r. simpl firstn.
      simpl lsum. rewrite lsum_app in *. simpl lsum. lra.
    + (* a is not chosen: the chosen ones are all >= a *)
      apply in_split in Hin. destruct Hin as [r1 [r2 ->]].
      assert (Hp' : Permutation Ls (s ++ (r1 ++ r2))).
      { apply Permutation_cons_inv with a.
        eapply perm_trans; [exact Hp|].
        replace (s ++ r1 ++ a :: r2) with ((s ++ r1) ++ a :: r2) by (rewrite app_assoc; reflexivity).
        replace (a :: s ++ r1 ++ r2) with (a :: (s ++ r1) ++ r2) by (rewrite app_assoc; reflexivity).
        apply Permutation_sym, Permutation_middle. }
      specialize (IH s (r1 ++ r2) Hs Hp').
      destruct (length s) as [|c] eqn:Hlen.
      * simpl. destruct s; [simpl; lra | discriminate].
      * assert (Hc : (c < length Ls)%nat).
        { apply Permutation_length in Hp'. rewrite app_length in Hp'. lia. }
        simpl firstn. simpl lsum.
        rewrite lsum_firstn_S in IH by assumption.
        assert (a <= nth c Ls 0).
        { rewrite Forall_forall in Ha. apply Ha, nth_In; assumption. }
        lra.
Qed.

(* A masked sum over positions 0..n-1 is the sum of the selected entries. *)
Lemma sumR_mask_lsum : forall (p : nat -> bool) (f : nat -> R) n,
  sumR (fun i => if p i then f i else 0) n = lsum (map f (filter p (seq 0 n))).
Proof.
  intros p f n; induction n; [reflexivity|].
  rewrite seq_S, filter_app, map_app, lsum_app. simpl sumR. rewrite IHn. simpl.
  destruct (p n); simpl; lra.
Qed.

Lemma perm_filter_split : forall (A : Type) (p : A -> bool) (l : list A),
  Permutation l (filter p l ++ filter (fun x => negb (p x)) l).
Proof.
  intros A p l; induction l as [|a l IH]; simpl; [constructor|].
  destruct (p a); simpl.
  - constructor; assumption.
  - eapply perm_trans; [apply perm_skip, IH|]. apply Permutation_middle.
Qed.

(** The checker's S_c^lo: with Ls the lower endpoints of the non-query
    beta_i sorted ascending, every placement P of c positions has
    lsum (firstn c Ls) <= S_P. *)
Theorem subset_sum_lower : forall n (beta lo : nat -> R) (p : nat -> bool) (Ls : list R) c,
  (forall i, (i < n)%nat -> lo i <= beta i) ->
  Permutation (map lo (seq 0 n)) Ls -> StronglySorted Rle Ls ->
  length (filter p (seq 0 n)) = c ->
  lsum (firstn c Ls) <= sumR (fun i => if p i then beta i else 0) n.
Proof.
  intros n beta lo p Ls c Hlo Hp Hs Hc.
  apply Rle_trans with (sumR (fun i => if p i then lo i else 0) n).
  - rewrite sumR_mask_lsum.
    assert (Hperm : Permutation Ls (map lo (filter p (seq 0 n))
                                   ++ map lo (filter (fun x => negb (p x)) (seq 0 n)))).
    { apply Permutation_sym. eapply perm_trans; [|exact Hp].
      rewrite <- map_app. apply Permutation_map, Permutation_sym, perm_filter_split. }
    assert (H := firstn_sorted_le Ls _ _ Hs Hperm). rewrite map_length, Hc in H. exact H.
  - apply sumR_le. intros i Hi. destruct (p i); [apply Hlo; assumption | lra].
Qed.

Lemma lsum_map_opp : forall l, lsum (map Ropp l) = - lsum l.
Proof. intros l; induction l; simpl; [lra|]. rewrite IHl; lra. Qed.

(** The checker's S_c^hi: with Hs the upper endpoints sorted descending,
    S_P <= lsum (firstn c Hs). *)
Theorem subset_sum_upper : forall n (beta hi : nat -> R) (p : nat -> bool) (Hs : list R) c,
  (forall i, (i < n)%nat -> beta i <= hi i) ->
  Permutation (map hi (seq 0 n)) Hs -> StronglySorted Rge Hs ->
  length (filter p (seq 0 n)) = c ->
  sumR (fun i => if p i then beta i else 0) n <= lsum (firstn c Hs).
Proof.
  intros n beta hi p Hs c Hhi Hp HS Hc.
  assert (Hsorted : StronglySorted Rle (map Ropp Hs)).
  { clear -HS. induction HS as [|a l _ IH Ha]; simpl; constructor; [assumption|].
    rewrite Forall_forall in *. intros y Hy. apply in_map_iff in Hy.
    destruct Hy as [x [<- Hx]]. specialize (Ha x Hx). lra. }
  assert (H := subset_sum_lower n (fun i => - beta i) (fun i => - hi i) p (map Ropp Hs) c
                 ltac:(intros i Hi; specialize (Hhi i Hi); lra)
                 ltac:(rewrite <- (map_map hi Ropp); apply Permutation_map; exact Hp)
                 Hsorted Hc).
  rewrite firstn_map, lsum_map_opp in H.
  rewrite (sumR_ext _ (fun i => - (if p i then beta i else 0))) in H
    by (intros; destruct (p i); lra).
  assert (E : forall f n, sumR (fun i => - f i) n = - sumR f n)
    by (intros f m; induction m; simpl; [lra|]; rewrite IHm; lra).
  rewrite E in H. lra.
Qed.

(** Together with Softmax.max_token_weight: for every placement of c
    positions, the copies of the max weigh (B - S) e_m with
    S_c^lo <= S <= S_c^hi, and B - S >= B - S_c^hi. *)
Corollary placement_bounds : forall n (beta lo hi : nat -> R) (p : nat -> bool) Ls Hs c,
  (forall i, (i < n)%nat -> lo i <= beta i <= hi i) ->
  Permutation (map lo (seq 0 n)) Ls -> StronglySorted Rle Ls ->
  Permutation (map hi (seq 0 n)) Hs -> StronglySorted Rge Hs ->
  length (filter p (seq 0 n)) = c ->
  lsum (firstn c Ls) <= sumR (fun i => if p i then beta i else 0) n <= lsum (firstn c Hs).
Proof.
  intros n beta lo hi p Ls Hs c Hb HpL HsL HpH HsH Hc. split.
  - apply (subset_sum_lower n beta lo p Ls c); auto. intros i Hi; apply Hb; assumption.
  - apply (subset_sum_upper n beta hi p Hs c); auto. intros i Hi; apply Hb; assumption.
Qed.
